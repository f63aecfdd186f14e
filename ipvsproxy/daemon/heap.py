"""The heap after a full sync: free pages returned, big allocations mapped on their own
(its survivors are frozen out of the cyclic collector by ``gcpause.freeze_survivors``).

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
from collections.abc import Callable


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
