"""Changes as a cluster makes them, each timed from its API write to the kernel holding it.

A run's changes are of three kinds, as many of each: a Service added (with its
EndpointSlice), one endpoint of a Service's slice replaced, a Service deleted. Each change
touches a Service of its own that no other change of the run touches, so every change is
timed on its own while many are in flight: the Services to change and to delete are made, and
seen in the kernel, before the clock starts (``prepare``); the added ones and the changed ones
go after it stops (``clean_up``), so every run starts from the same cluster.

Two phases: a Poisson stream (exponential gaps at ``rate`` changes a second, the kinds in a
random order), then, once every change of the stream has landed, a burst written as fast as
the writers go. A pool of writer threads sends the writes; a change's clock starts when its
first write is sent (one that waited for a free writer starts late, and how late is kept as
``write_lag_max_ms``). One watcher thread asks IPVS for each pending change's virtual server
until the kernel holds the change, or counts it lost after ``CHANGE_TIMEOUT``.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from bench.cluster import ENDPOINTS_PER_SERVICE, cluster_ip, endpoint_slice_object, pod_ip
from bench.cluster import service_object as cluster_service
from bench.daemon_latency import CHANGE_KINDS, CHANGE_TIMEOUT, _address, _wait
from ipvsproxy.model import IPAddress, TransportProtocol, VirtualServerKey

PHASES = ("stream", "burst")
# Blocks of a run's indices: added, changed, deleted Services, and the pods changes move to.
BLOCKS = 4
WRITERS = 8
# Between two sweeps of the pending changes: the watcher shares the lab's CPU with the proxy.
SWEEP_INTERVAL = 0.005
PREPARE_TIMEOUT = 600.0


class Kernel(Protocol):
    """What the watcher asks: one virtual server's real servers and weights (``Probe``)."""

    def weights(self, key: VirtualServerKey) -> Mapping[IPAddress, int] | None: ...


class Writer(Protocol):
    def apply(self, *objects: dict[str, Any]) -> None: ...

    def delete(self, *objects: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class StreamSettings:
    """How a run's changes arrive: ``per_kind`` of each kind in the stream at ``rate`` a
    second, then ``burst_per_kind`` of each at once."""

    per_kind: int
    rate: float
    burst_per_kind: int
    seed: int = 21

    @property
    def per_run(self) -> int:
        return len(CHANGE_KINDS) * (self.per_kind + self.burst_per_kind)

    def span(self) -> int:
        """How many service indices one run uses."""
        return BLOCKS * (self.per_kind + self.burst_per_kind)

    def as_json(self) -> dict[str, Any]:
        kinds = len(CHANGE_KINDS)
        return {
            "stream_changes": kinds * self.per_kind,
            "stream_rate_per_s": self.rate,
            "stream_arrivals": "Poisson (exponential gaps), kinds in a random order",
            "burst_changes": kinds * self.burst_per_kind,
            "burst": "written at once, after the stream's changes landed",
            "kinds": list(CHANGE_KINDS),
            "writers": WRITERS,
            "seed": self.seed,
        }


@dataclass(frozen=True)
class Change:
    kind: str
    phase: str
    due_s: float  # after its phase started
    index: int  # the Service it touches
    moved_pod: int  # endpoint_changed: the pod its first endpoint moves to

    @property
    def name(self) -> str:
        return f"churn-{self.index}"

    @property
    def key(self) -> VirtualServerKey:
        return VirtualServerKey(TransportProtocol.TCP, _address(cluster_ip(self.index)), 80)

    def service(self) -> dict[str, Any]:
        return cluster_service(self.index, self.name, node_port=False)

    def slice_(self) -> dict[str, Any]:
        return endpoint_slice_object(self.index, self.name)

    def first_pod(self) -> IPAddress:
        return _address(self.slice_()["endpoints"][0]["addresses"][0])

    def moved_slice(self) -> dict[str, Any]:
        slice_ = self.slice_()
        slice_["endpoints"][0]["addresses"] = [pod_ip(self.moved_pod)]
        return slice_

    def write(self, writer: Writer) -> None:
        match self.kind:
            case "service_added":
                writer.apply(self.service(), self.slice_())
            case "endpoint_changed":
                writer.apply(self.moved_slice())
            case _:
                writer.delete(self.service(), self.slice_())

    def landed(self, weights: Mapping[IPAddress, int] | None) -> bool:
        """Whether the kernel holds the change, from its virtual server's real servers."""
        match self.kind:
            case "service_added":
                return _programmed(weights, self.first_pod())
            case "endpoint_changed":
                seen = weights or {}
                moved = _address(pod_ip(self.moved_pod))
                return seen.get(moved, 0) > 0 and not seen.get(self.first_pod(), 0)
            case _:
                return weights is None


def _programmed(weights: Mapping[IPAddress, int] | None, first: IPAddress) -> bool:
    return weights is not None and len(weights) == ENDPOINTS_PER_SERVICE and first in weights


def plan(settings: StreamSettings, base: int) -> list[Change]:
    """The run's changes, the stream's then the burst's, on indices ``base`` onwards."""
    rng = random.Random(settings.seed + base)
    total = settings.per_kind + settings.burst_per_kind
    blocks = {kind: base + number * total for number, kind in enumerate(CHANGE_KINDS)}
    moved_block = base + len(CHANGE_KINDS) * total
    used = dict.fromkeys(CHANGE_KINDS, 0)

    def change(kind: str, phase: str, due: float) -> Change:
        offset = used[kind]
        used[kind] += 1
        moved = (moved_block + offset) * ENDPOINTS_PER_SERVICE
        return Change(kind, phase, due, blocks[kind] + offset, moved)

    stream_kinds = [kind for kind in CHANGE_KINDS for _ in range(settings.per_kind)]
    rng.shuffle(stream_kinds)
    changes, due = [], 0.0
    for kind in stream_kinds:
        due += rng.expovariate(settings.rate)
        changes.append(change(kind, "stream", due))
    burst_kinds = [kind for kind in CHANGE_KINDS for _ in range(settings.burst_per_kind)]
    rng.shuffle(burst_kinds)
    changes += [change(kind, "burst", 0.0) for kind in burst_kinds]
    return changes


@dataclass
class Timing:
    """One change's clock: set by the writer that sends it and the watcher that sees it."""

    change: Change
    written_at: float | None = None
    landed_at: float | None = None
    lag_s: float = 0.0
    error: str | None = None
    lost: bool = False

    @property
    def resolved(self) -> bool:
        return self.landed_at is not None or self.error is not None or self.lost


def prepare(writer: Writer, probe: Kernel, changes: list[Change]) -> None:
    """The Services the run changes and deletes, made and in the kernel; not timed."""
    made = [c for c in changes if c.kind != "service_added"]
    with ThreadPoolExecutor(WRITERS) as pool:
        list(pool.map(lambda c: writer.apply(c.service(), c.slice_()), made))

    def everything_programmed() -> bool:
        return all(_programmed(probe.weights(c.key), c.first_pod()) for c in made)

    if _wait(everything_programmed, PREPARE_TIMEOUT, interval=0.5) is None:
        raise RuntimeError("the run's Services to change and delete never reached the kernel")


def clean_up(writer: Writer, changes: list[Change]) -> None:
    """Every Service the run made gone again (a delete of one already gone is no error)."""
    with ThreadPoolExecutor(WRITERS) as pool:
        list(pool.map(lambda c: writer.delete(c.service(), c.slice_()), changes))


def run_phase(writer: Writer, probe: Kernel, changes: list[Change]) -> list[Timing]:
    """The changes written at their due times, each timed until the kernel holds it."""
    timings = [Timing(change) for change in changes]
    scheduled = threading.Event()
    failures: list[BaseException] = []
    watcher = threading.Thread(
        target=_watch, args=(probe, timings, scheduled, failures), name="bench-watcher"
    )
    watcher.start()
    started = time.perf_counter()

    def send(timing: Timing) -> None:
        timing.written_at = time.perf_counter()
        timing.lag_s = timing.written_at - started - timing.change.due_s
        try:
            timing.change.write(writer)
        except Exception as error:  # a failed write is a result, kept
            timing.error = f"{type(error).__name__}: {error}"[:300]

    try:
        with ThreadPoolExecutor(WRITERS) as pool:
            for timing in timings:
                time.sleep(max(0.0, started + timing.change.due_s - time.perf_counter()))
                pool.submit(send, timing)
    finally:
        scheduled.set()
        watcher.join()
    if failures:
        raise RuntimeError(f"the watcher failed: {failures[0]}") from failures[0]
    return timings


def _watch(
    probe: Kernel, timings: list[Timing], scheduled: threading.Event, failures: list[BaseException]
) -> None:
    """Sweeps the written, unresolved changes until every one is resolved."""
    try:
        while not (scheduled.is_set() and all(t.resolved for t in timings)):
            for timing in timings:
                if timing.written_at is None or timing.resolved:
                    continue
                if timing.change.landed(probe.weights(timing.change.key)):
                    timing.landed_at = time.perf_counter()
                elif time.perf_counter() - timing.written_at > CHANGE_TIMEOUT:
                    timing.lost = True
            time.sleep(SWEEP_INTERVAL)
    except BaseException as error:  # handed to the thread that waits
        failures.append(error)
        for timing in timings:
            timing.lost = timing.lost or not timing.resolved


def summary(timings: list[Timing]) -> dict[str, Any]:
    """The run's raw latencies by kind and by phase, and what did not land."""
    by_kind: dict[str, list[float]] = {kind: [] for kind in CHANGE_KINDS}
    by_phase: dict[str, list[float]] = {phase: [] for phase in PHASES}
    for timing in timings:
        if timing.landed_at is None or timing.written_at is None:
            continue
        milliseconds = (timing.landed_at - timing.written_at) * 1000
        by_kind[timing.change.kind].append(milliseconds)
        by_phase[timing.change.phase].append(milliseconds)
    errors = [t.error for t in timings if t.error is not None]
    return {
        "latency_samples_ms": by_kind,
        "latency_samples_by_phase_ms": by_phase,
        "latency_changes": sum(len(values) for values in by_kind.values()),
        "latency_lost_changes": sum(t.lost for t in timings),
        "latency_failed_writes": len(errors),
        "write_errors": errors[:5],
        "write_lag_max_ms": max((t.lag_s for t in timings), default=0.0) * 1000,
    }


def run_phases(writer: Writer, probe: Kernel, changes: list[Change]) -> list[Timing]:
    """The stream, then the burst once every change of the stream is resolved."""
    timings: list[Timing] = []
    for phase in PHASES:
        timings += run_phase(writer, probe, [c for c in changes if c.phase == phase])
    return timings
