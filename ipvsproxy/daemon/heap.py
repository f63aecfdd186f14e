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
* glibc maps an allocation of 128 KB or more on its own and unmaps it when freed, but each
  such free raises that threshold to the freed size (up to 32 MB), and the trim threshold to
  twice it. After one /metrics answer of a big cluster (5.7 MB at 10,000 services) the next
  answers came from the heap of the thread that made them, and 10-14 MB stayed with each of
  the handler threads (211 MB against 167 MB before the first scrape, outside the lab).
  ``map_big_allocations`` fixes the threshold at 1 MB, which also stops its moving: big
  buffers go back to the system when freed (184 MB after the same scrapes).
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
M_MMAP_THRESHOLD = -3
MAPPED_FROM = 1 << 20


def _mallopt() -> Callable[[int, int], int] | None:
    try:
        mallopt: Callable[[int, int], int] = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):
        return None
    return mallopt


_MALLOPT = _mallopt()


def map_big_allocations() -> bool:
    """Whether allocations of ``MAPPED_FROM`` bytes and more are now mapped on their own,
    whatever size was freed before (False where there is no way to ask)."""
    return bool(_MALLOPT(M_MMAP_THRESHOLD, MAPPED_FROM)) if _MALLOPT is not None else False


def release_free_memory() -> bool:
    """Whether memory was returned (False also where there is no way to ask)."""
    return bool(_TRIM(0)) if _TRIM is not None else False
