"""After full syncs: garbage cycles are collected, the survivors frozen out of later collections,
and freed heap memory goes back to the OS where the C library allows it."""

from __future__ import annotations

import gc
from types import MappingProxyType

import pytest

from bench.cluster import NODE_NAME, cluster_objects
from ipvsproxy.cluster.parse import snapshot_from_objects
from ipvsproxy.daemon import daemon as daemon_module
from ipvsproxy.daemon import heap
from ipvsproxy.daemon.daemon import Daemon, DaemonOptions
from ipvsproxy.daemon.sources import Reading
from ipvsproxy.gcpause import freeze_survivors
from ipvsproxy.kernel.testing import FakeKernel
from ipvsproxy.model import ClusterSnapshot
from ipvsproxy.translate import Settings


def test_trimming_asks_for_everything_free_and_is_a_no_op_without_malloc_trim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[int] = []

    def trim(pad: int) -> int:
        asked.append(pad)
        return 1

    monkeypatch.setattr(heap, "_TRIM", trim)
    assert heap.release_free_memory() is True
    assert asked == [0]

    monkeypatch.setattr(heap, "_TRIM", None)
    assert heap.release_free_memory() is False


def test_big_allocations_are_mapped_from_one_mb_and_it_is_a_no_op_without_mallopt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[tuple[int, int]] = []

    def mallopt(option: int, value: int) -> int:
        asked.append((option, value))
        return 1

    monkeypatch.setattr(heap, "_MALLOPT", mallopt)
    assert heap.map_big_allocations() is True
    assert asked == [(heap.M_MMAP_THRESHOLD, 1 << 20)]

    monkeypatch.setattr(heap, "_MALLOPT", None)
    assert heap.map_big_allocations() is False


def test_the_c_librarys_mallopt_takes_the_threshold() -> None:
    """glibc here: the call is real, and it answers 1 (success)."""
    assert heap.map_big_allocations() is True


class _Unchanging:
    """A source whose cluster never changes: syncs after the first are incremental."""

    snapshot_value = ClusterSnapshot(MappingProxyType({}), MappingProxyType({}))

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def wait_for_sync(self, timeout: float) -> bool:
        return True

    def snapshot(self) -> Reading:
        return Reading(self.snapshot_value, [])


def test_the_daemon_freezes_and_trims_after_a_full_sync_and_not_after_an_incremental_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    done: list[str] = []
    monkeypatch.setattr(daemon_module, "release_free_memory", lambda: done.append("trim"))
    monkeypatch.setattr(daemon_module, "freeze_survivors", lambda: done.append("freeze"))
    daemon = Daemon(FakeKernel().kernel(), Settings(), DaemonOptions(healthz=None, metrics=None))
    daemon._source = _Unchanging()

    daemon._sync()
    assert done == ["freeze", "trim"]
    daemon._sync()
    assert done == ["freeze", "trim"]


def test_no_collection_walks_what_a_full_sync_builds_before_the_freeze_at_its_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stages' own pauses end inside the sync's: the freeze's collection is the first."""
    source = _Unchanging()
    source.snapshot_value, _ = snapshot_from_objects(cluster_objects(300), NODE_NAME)
    events: list[str] = []

    def freeze() -> None:
        events.append("freeze")
        freeze_survivors()

    def collection(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            events.append(f"collection of generation {info['generation']}")

    monkeypatch.setattr(daemon_module, "freeze_survivors", freeze)
    daemon = Daemon(FakeKernel().kernel(), Settings(), DaemonOptions(healthz=None, metrics=None))
    daemon._source = source
    was = gc.isenabled()
    gc.enable()
    gc.collect()
    gc.callbacks.append(collection)
    try:
        daemon._sync()
    finally:
        gc.callbacks.remove(collection)
        if not was:
            gc.disable()
    assert daemon.syncer.reconciler.last_desired is not None
    assert events[:2] == ["freeze", "collection of generation 2"]
