"""Give the heap's free pages back to the operating system after a large transient peak.

glibc keeps memory freed by a process mapped, to reuse it; after the first sync (and each
full one) of a large cluster that is tens of MB of RSS the daemon no longer uses, which a
node's memory accounting charges to it until the next peak. ``malloc_trim(0)`` returns the
free pages. Where the C library has no malloc_trim (musl), this does nothing.
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


def release_free_memory() -> bool:
    """Whether memory was returned (False also where there is no way to ask)."""
    return bool(_TRIM(0)) if _TRIM is not None else False
