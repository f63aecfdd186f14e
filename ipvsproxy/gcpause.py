"""Pause the cyclic garbage collector around bulk building of acyclic values.

Parsing and translating 10,000 services allocates a million small frozen objects; each
allocation burst triggers collections that walk the whole heap (the API JSON and the
snapshot included) and find nothing, since these values hold no reference cycles. That walking
was half the CPU time of parse + translate. Reference counting still frees everything.

The collector's switch is one per process, and the daemon pauses it from several threads (the
sync loop, each informer's list, /metrics): pauses are counted under a lock, the first one in
turns the collector off and the last one out puts back what the first one found. Reading and
flipping the switch in each pause on its own let one pause's end re-enable the collector in
the middle of another's, or a pause that began meanwhile leave it off for good.

What a pause builds is all young when it ends, and the collector's next pass walks every object
of it (0.3 s for the million objects of a 10,000-service translation). A caller that collects
and freezes what survives (the daemon's full sync) holds one pause across all its stages and
the freeze, so that they are walked once, by that collection, and not again at each stage's end.

A full sync of a large cluster leaves millions of long-lived objects (the informers' stores,
the kept translation). The collector walks all of them in each full collection, which comes
unbidden once enough new objects have survived: at 10,000 services x 10 endpoints one such
walk took 0.7-0.8 s outside the lab, inside whichever incremental sync set it off.
``freeze_survivors`` collects once, at the end of a full sync or of an informer's list, then
moves everything alive into the permanent generation, which no later collection walks; the
next one walks only what came since (13-28 ms there). An informer's list freezes what it
parsed so that the first full sync's collection does not walk the stores again. Frozen
objects are still freed by reference counting, as the proxy's values hold no cycles; a cycle
that forms among them later is never collected, so each freeze collects first, never after.
"""

from __future__ import annotations

import gc
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from functools import wraps
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


class _Pauses:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0
        self._was_enabled = False

    @contextmanager
    def paused(self) -> Iterator[None]:
        with self._lock:
            if self._count == 0:
                self._was_enabled = gc.isenabled()
                gc.disable()
            self._count += 1
        try:
            yield
        finally:
            with self._lock:
                self._count -= 1
                if self._count == 0 and self._was_enabled:
                    gc.enable()


_PAUSES = _Pauses()


def cyclic_gc_paused() -> AbstractContextManager[None]:
    """The cyclic collector off inside; once no pause is on, as the first of them found it."""
    return _PAUSES.paused()


def without_cyclic_gc(function: Callable[P, R]) -> Callable[P, R]:
    """Run ``function`` with the cyclic collector off; once no pause is on, the collector is
    as the first of them found it."""

    @wraps(function)
    def paused(*args: P.args, **kwargs: P.kwargs) -> R:
        with cyclic_gc_paused():
            return function(*args, **kwargs)

    return paused


def freeze_survivors() -> None:
    """Collect garbage cycles, then keep every surviving object out of later collections."""
    gc.collect()
    gc.freeze()


@without_cyclic_gc
def decode_json(document: str | bytes) -> Any:
    """json.loads for a whole-cluster document: decoding 10,000 services' JSON makes over a
    million dicts, lists and strings, and the collections those trigger tripled its CPU time."""
    return json.loads(document)
