"""bench.stream: the plan of a run's changes, and each change timed on its own while others
are in flight, on an in-memory API and kernel."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping
from typing import Any

import pytest

from bench.cluster import cluster_ip
from bench.daemon_latency import CHANGE_KINDS, _address
from bench.stream import StreamSettings, clean_up, plan, prepare, run_phases, summary
from ipvsproxy.model import IPAddress, VirtualServerKey

SETTINGS = StreamSettings(per_kind=6, rate=50.0, burst_per_kind=2)
# How long the fake kernel takes to hold a write.
KERNEL_DELAY = 0.05


class FakeCluster:
    """An API whose writes reach a kernel table of cluster IP -> real servers, late."""

    def __init__(self, refuse: str | None = None) -> None:
        self.kernel: dict[str, dict[IPAddress, int]] = {}
        self._refuse = refuse
        self._timers: list[threading.Timer] = []

    def _later(self, action: Any) -> None:
        timer = threading.Timer(KERNEL_DELAY, action)
        self._timers.append(timer)
        timer.start()

    def apply(self, *objects: dict[str, Any]) -> None:
        for obj in objects:
            if obj["kind"] != "EndpointSlice":
                continue
            if obj["metadata"]["name"] == self._refuse:
                raise OSError("refused")
            index = int(obj["metadata"]["name"].removesuffix("-abcde").split("-")[1])
            reals = {_address(e["addresses"][0]): 1 for e in obj["endpoints"]}
            ip = cluster_ip(index)
            self._later(lambda ip=ip, reals=reals: self.kernel.update({ip: reals}))

    def delete(self, *objects: dict[str, Any]) -> None:
        for obj in objects:
            if obj["kind"] == "Service":
                ip = obj["spec"]["clusterIPs"][0]
                self._later(lambda ip=ip: self.kernel.pop(ip, None))

    def weights(self, key: VirtualServerKey) -> Mapping[IPAddress, int] | None:
        return self.kernel.get(str(key.address))

    def settle(self) -> None:
        for timer in self._timers:
            timer.join()


def test_a_plan_has_as_many_of_each_kind_each_on_a_service_of_its_own() -> None:
    changes = plan(SETTINGS, base=1000)

    assert len(changes) == SETTINGS.per_run == 24
    assert Counter(c.kind for c in changes) == dict.fromkeys(CHANGE_KINDS, 8)
    assert Counter(c.phase for c in changes) == {"stream": 18, "burst": 6}
    assert len({c.index for c in changes}) == len(changes)
    assert all(1000 <= c.index < 1000 + SETTINGS.span() for c in changes)
    stream = [c.due_s for c in changes if c.phase == "stream"]
    assert stream == sorted(stream) and stream[0] > 0
    assert all(c.due_s == 0 for c in changes if c.phase == "burst")


def test_the_moved_pods_are_no_service_s_pods() -> None:
    changes = plan(SETTINGS, base=1000)
    pods = {c.first_pod() for c in changes}
    moved = {c.moved_slice()["endpoints"][0]["addresses"][0] for c in changes}

    assert not pods & {_address(address) for address in moved}


def test_every_change_is_timed_until_the_kernel_holds_it() -> None:
    cluster = FakeCluster()
    changes = plan(SETTINGS, base=1000)
    prepare(cluster, cluster, changes)

    measured = summary(run_phases(cluster, cluster, changes))

    assert measured["latency_changes"] == 24
    assert {k: len(v) for k, v in measured["latency_samples_by_phase_ms"].items()} == {
        "stream": 18,
        "burst": 6,
    }
    samples = [s for values in measured["latency_samples_ms"].values() for s in values]
    assert min(samples) >= KERNEL_DELAY * 1000
    assert measured["latency_lost_changes"] == measured["latency_failed_writes"] == 0
    clean_up(cluster, changes)
    cluster.settle()
    assert cluster.kernel == {}


def test_a_refused_write_is_counted_and_the_others_still_measured() -> None:
    changes = plan(SETTINGS, base=1000)
    added = next(c for c in changes if c.kind == "service_added")
    cluster = FakeCluster(refuse=f"{added.name}-abcde")
    prepare(cluster, cluster, changes)

    measured = summary(run_phases(cluster, cluster, changes))
    cluster.settle()

    assert measured["latency_failed_writes"] == 1
    assert measured["write_errors"] == ["OSError: refused"]
    assert measured["latency_changes"] == 23


@pytest.mark.parametrize("kind", CHANGE_KINDS)
def test_a_change_has_not_landed_before_its_write(kind: str) -> None:
    change = next(c for c in plan(SETTINGS, base=1000) if c.kind == kind)
    before = None if kind == "service_added" else dict.fromkeys(_slice_pods(change.slice_()), 1)

    assert not change.landed(before)


def _slice_pods(slice_: dict[str, Any]) -> list[IPAddress]:
    return [_address(e["addresses"][0]) for e in slice_["endpoints"]]
