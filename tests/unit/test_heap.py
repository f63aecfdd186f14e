"""Freed heap memory goes back to the OS after full syncs, where the C library allows it."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from ipvsproxy.daemon import daemon as daemon_module
from ipvsproxy.daemon import heap
from ipvsproxy.daemon.daemon import Daemon, DaemonOptions
from ipvsproxy.daemon.sources import Reading
from ipvsproxy.kernel.bundle import FakeKernel
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


def test_the_daemon_trims_after_a_full_sync_and_not_after_an_incremental_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trims: list[bool] = []
    monkeypatch.setattr(daemon_module, "release_free_memory", lambda: trims.append(True))
    daemon = Daemon(FakeKernel().kernel(), Settings(), DaemonOptions(healthz=None, metrics=None))
    daemon._source = _Unchanging()

    daemon._sync()
    assert trims == [True]
    daemon._sync()
    assert trims == [True]
