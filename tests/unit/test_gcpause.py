import gc
import threading
import weakref
from collections.abc import Iterator

import pytest

from ipvsproxy.gcpause import decode_json, freeze_survivors, without_cyclic_gc

PATIENCE = 30.0


@pytest.fixture
def collector_enabled() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


@pytest.mark.parametrize("enabled", [True, False])
def test_decode_json_leaves_the_collector_as_it_found_it(enabled: bool) -> None:
    was = gc.isenabled()
    try:
        if enabled:
            gc.enable()
        else:
            gc.disable()
        assert decode_json(b'{"items": [{"kind": "Service"}]}') == {"items": [{"kind": "Service"}]}
        assert gc.isenabled() is enabled
    finally:
        if was:
            gc.enable()
        else:
            gc.disable()


def test_decode_json_refuses_what_json_refuses() -> None:
    with pytest.raises(ValueError):
        decode_json("{not json")
    assert gc.isenabled()


class HeldPause:
    """A pause held open on a thread of its own until ``end``."""

    def __init__(self) -> None:
        self.began = threading.Event()
        self._end = threading.Event()
        self.enabled_inside: list[bool] = []
        self._thread = threading.Thread(target=without_cyclic_gc(self._hold))

    def _hold(self) -> None:
        self.began.set()
        self._end.wait(PATIENCE)
        self.enabled_inside.append(gc.isenabled())

    def start(self) -> "HeldPause":
        self._thread.start()
        assert self.began.wait(PATIENCE)
        return self

    def end(self) -> None:
        self._end.set()
        self._thread.join(PATIENCE)
        assert not self._thread.is_alive()


def test_a_pause_that_ends_inside_another_leaves_the_collector_off_until_both_end(
    collector_enabled: None,
) -> None:
    first = HeldPause().start()
    second = HeldPause().start()
    first.end()
    assert not gc.isenabled()
    second.end()
    assert gc.isenabled()
    assert first.enabled_inside == second.enabled_inside == [False]


def test_a_pause_that_begins_and_ends_inside_another_keeps_it_paused(
    collector_enabled: None,
) -> None:
    outer = HeldPause().start()
    inner = HeldPause().start()
    inner.end()
    assert not gc.isenabled()
    outer.end()
    assert gc.isenabled()


def test_pauses_from_many_threads_leave_the_collector_on_and_each_ran_paused(
    collector_enabled: None,
) -> None:
    seen: list[bool] = []
    lock = threading.Lock()

    def work() -> None:
        for _ in range(200):
            with lock:
                seen.append(gc.isenabled())

    threads = [threading.Thread(target=without_cyclic_gc(work)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(PATIENCE)
    assert gc.isenabled()
    assert seen == [False] * 1600


def test_a_collector_switched_off_before_the_pauses_stays_off() -> None:
    was = gc.isenabled()
    gc.disable()
    try:
        first = HeldPause().start()
        second = HeldPause().start()
        first.end()
        second.end()
        assert not gc.isenabled()
    finally:
        if was:
            gc.enable()


def test_a_pause_whose_function_raises_still_ends(collector_enabled: None) -> None:
    @without_cyclic_gc
    def fail() -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        fail()
    assert gc.isenabled()


class _Linked:
    def __init__(self) -> None:
        self.link: _Linked | None = None


def test_freezing_collects_garbage_cycles_first_and_keeps_the_living_out_of_collections() -> None:
    cycle = _Linked()
    cycle.link = cycle
    garbage = weakref.ref(cycle)
    del cycle
    living = _Linked()
    gc.unfreeze()
    assert not gc.get_freeze_count()

    freeze_survivors()

    assert garbage() is None
    assert gc.get_freeze_count() > 0
    assert not any(obj is living for gen in range(3) for obj in gc.get_objects(gen))
