"""The heap after a full sync: survivors frozen out of the cyclic collector, free pages returned.

* A full sync of a large cluster leaves millions of long-lived objects (the informers' stores,
  the kept translation). Python's cyclic collector walks all of them in each full collection,
  which comes unbidden once enough new objects have survived: at 10,000 services x 10
  endpoints one such walk took 0.7-0.8 s outside the lab, inside whichever incremental sync set
  it off. ``freeze_survivors`` collects once, at the end of the full sync, then moves everything
  alive into the permanent generation, which no later collection walks; the next full sync's
  collection walks only what came since (13-28 ms there). Frozen objects are still freed by
  reference counting, as the proxy's values hold no cycles; a cycle that forms among them
  later is never collected, so the daemon collects before freezing, never after.
* glibc keeps memory freed by a process mapped, to reuse it; after the first sync (and each
  full one) of a large cluster that is tens of MB of RSS the daemon no longer uses, which a
  node's memory accounting charges to it until the next peak. ``malloc_trim(0)`` returns the
  free pages. Where the C library has no malloc_trim (musl), this does nothing.
"""

from __future__ import annotations

import ctypes
import gc
from collections.abc import Callable


def freeze_survivors() -> None:
    """Collect garbage cycles, then keep every surviving object out of later collections."""
    gc.collect()
    gc.freeze()


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return None
    return trim


_TRIM = _malloc_trim()


def release_free_memory() -> bool:
    """Whether memory was returned (False also where there is no way to ask)."""
    return bool(_TRIM(0)) if _TRIM is not None else False
