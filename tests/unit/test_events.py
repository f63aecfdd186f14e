"""Events: correlated as client-go's EventCorrelator does, written off the sync's thread."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest

from ipvsproxy.cluster.connection import ApiError
from ipvsproxy.cluster.events import (
    AGGREGATED_PREFIX,
    WARNING,
    EventCorrelator,
    EventSource,
    EventWrite,
    JsonObject,
    ObjectReference,
)
from ipvsproxy.cluster.events import Event as KubeEvent
from ipvsproxy.daemon.events import EventRecorder

SOURCE = EventSource("ipvsproxy", "node-a")
WEB = ObjectReference("Service", "shop", "web", "uid-1")
PATIENCE = 30.0


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def refused(message: str = "the kernel refused it", about: ObjectReference = WEB) -> KubeEvent:
    return KubeEvent(about, WARNING, "KernelRefused", message)


def written(correlator: EventCorrelator, event: KubeEvent) -> EventWrite:
    write = correlator.correlate(event)
    assert write is not None
    return write


def test_a_first_event_is_created_whole_about_its_object() -> None:
    write = written(EventCorrelator(SOURCE, Clock()), refused())
    assert write.patch is None and write.namespace == "shop"
    assert write.name.startswith("web.")
    body = write.body
    assert body["metadata"] == {"name": write.name, "namespace": "shop"}
    assert body["involvedObject"] == {
        "kind": "Service",
        "namespace": "shop",
        "name": "web",
        "uid": "uid-1",
        "apiVersion": "v1",
    }
    assert (body["type"], body["reason"], body["message"], body["count"]) == (
        "Warning",
        "KernelRefused",
        "the kernel refused it",
        1,
    )
    assert body["source"] == {"component": "ipvsproxy", "host": "node-a"}
    assert body["firstTimestamp"] == body["lastTimestamp"] == "2023-11-14T22:13:20Z"


def test_the_same_event_again_patches_the_first_with_its_count() -> None:
    clock = Clock()
    correlator = EventCorrelator(SOURCE, clock)
    first = written(correlator, refused())
    clock.now += 60
    second = written(correlator, refused())
    assert second.name == first.name
    assert second.patch == {
        "count": 2,
        "lastTimestamp": "2023-11-14T22:14:20Z",
        "message": "the kernel refused it",
    }
    assert second.body["firstTimestamp"] == first.body["firstTimestamp"]


def test_ten_different_messages_about_one_object_become_one_combined_event() -> None:
    correlator = EventCorrelator(SOURCE, Clock())
    writes = [written(correlator, refused(f"refused object {n}")) for n in range(12)]
    assert [w.patch is None for w in writes[:9]] == [True] * 9
    assert all(not w.body["message"].startswith(AGGREGATED_PREFIX) for w in writes[:9])
    combined = writes[9:]
    assert all(w.body["message"].startswith(AGGREGATED_PREFIX) for w in combined)
    # One combined event, created once then patched.
    assert len({w.name for w in combined}) == 1
    assert [w.patch is None for w in combined] == [True, False, False]
    assert combined[-1].body["count"] == 3


def test_messages_ten_minutes_apart_are_not_combined() -> None:
    clock = Clock()
    correlator = EventCorrelator(SOURCE, clock)
    for n in range(12):
        clock.now += 601
        assert (
            not written(correlator, refused(f"refused {n}"))
            .body["message"]
            .startswith(AGGREGATED_PREFIX)
        )


def test_an_object_gets_25_events_at_once_then_one_per_five_minutes() -> None:
    clock = Clock()
    correlator = EventCorrelator(SOURCE, clock)
    kept = [correlator.correlate(refused()) for _ in range(30)]
    assert sum(w is not None for w in kept) == 25
    clock.now += 299
    assert correlator.correlate(refused()) is None
    clock.now += 1
    allowed = correlator.correlate(refused())
    # The count carries every occurrence, the dropped ones too, as client-go's does.
    assert allowed is not None and allowed.body["count"] == 32
    # Another object has a bucket of its own.
    other = ObjectReference("Service", "shop", "cart", "uid-2")
    assert correlator.correlate(refused(about=other)) is not None


def test_what_the_correlator_keeps_is_bounded() -> None:
    correlator = EventCorrelator(SOURCE, Clock(), cache_size=8)
    for n in range(100):
        correlator.correlate(refused(about=ObjectReference("Service", "ns", f"svc-{n}")))
    caches = (correlator._similar, correlator._seen, correlator._buckets)
    assert [len(cache) for cache in caches] == [8, 8, 8]


def test_a_long_message_is_cut() -> None:
    write = written(EventCorrelator(SOURCE, Clock()), refused("x" * 5000))
    assert len(write.body["message"]) == 1024


@dataclass
class Sink:
    """Records writes; ``answers`` (popped per call) raise, ``gate`` holds every call."""

    created: list[tuple[str, JsonObject]] = field(default_factory=list)
    patched: list[tuple[str, str, JsonObject]] = field(default_factory=list)
    answers: list[Exception | None] = field(default_factory=list)
    gate: threading.Event = field(default_factory=threading.Event)
    entered: threading.Event = field(default_factory=threading.Event)
    calls: int = 0

    def __post_init__(self) -> None:
        self.gate.set()

    def _answer(self) -> None:
        self.calls += 1
        self.entered.set()
        assert self.gate.wait(PATIENCE)
        if self.answers and (error := self.answers.pop(0)) is not None:
            raise error

    def create(self, namespace: str, body: JsonObject) -> None:
        self._answer()
        self.created.append((namespace, body))

    def patch(self, namespace: str, name: str, patch: JsonObject) -> None:
        self._answer()
        self.patched.append((namespace, name, patch))


class Results:
    def __init__(self) -> None:
        self.seen: list[str] = []
        self.changed = threading.Condition()

    def __call__(self, result: str) -> None:
        with self.changed:
            self.seen.append(result)
            self.changed.notify_all()

    def wait_for(self, count: int) -> list[str]:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.seen) >= count, PATIENCE), self.seen
            return list(self.seen)


@pytest.fixture
def results() -> Results:
    return Results()


@contextmanager
def recorder(sink: Sink, results: Results, queue_size: int = 1000) -> Iterator[EventRecorder]:
    """A recorder writing on a thread of its own (the daemon's worker) for the block."""
    made = EventRecorder(sink, SOURCE, counted=results, retry_delay=0.0, queue_size=queue_size)
    thread = threading.Thread(target=made.run)
    thread.start()
    try:
        yield made
    finally:
        made.stop()
        thread.join(PATIENCE)
        assert not thread.is_alive()


def test_events_are_created_then_patched_on_the_recorder_s_thread(results: Results) -> None:
    sink = Sink()
    with recorder(sink, results) as events:
        events.event(WEB, WARNING, "KernelRefused", "refused")
        events.event(WEB, WARNING, "KernelRefused", "refused")
        assert results.wait_for(2) == ["created", "patched"]
    assert sink.created[0][1]["message"] == "refused"
    assert sink.patched[0][2]["count"] == 2


def test_recording_never_waits_for_the_api_and_drops_beyond_its_queue(results: Results) -> None:
    sink = Sink()
    sink.gate.clear()  # the API server hangs
    with recorder(sink, results, queue_size=3) as events:
        events.event(WEB, WARNING, "KernelRefused", "refused 0")
        assert sink.entered.wait(PATIENCE)
        for n in range(1, 10):
            events.event(WEB, WARNING, "KernelRefused", f"refused {n}")
        # One in the writer's hands, three queued, six dropped, none of it waiting.
        assert results.wait_for(6) == ["dropped"] * 6
        sink.gate.set()
        assert results.wait_for(10)[6:] == ["created"] * 4


def test_an_unreachable_api_is_retried_and_a_refusal_is_not(results: Results) -> None:
    sink = Sink(answers=[ApiError("cannot reach"), ApiError("cannot reach"), None])
    with recorder(sink, results) as events:
        events.event(WEB, WARNING, "KernelRefused", "refused")
        assert results.wait_for(1) == ["created"] and sink.calls == 3
        sink.answers = [ApiError("forbidden", status=403)]
        events.event(WEB, WARNING, "KernelRefused", "another")
        assert results.wait_for(2)[1] == "failed" and sink.calls == 4


def test_a_patch_of_an_event_gone_from_the_api_creates_it_again(results: Results) -> None:
    sink = Sink()
    with recorder(sink, results) as events:
        events.event(WEB, WARNING, "KernelRefused", "refused")
        results.wait_for(1)
        sink.answers = [ApiError("not found", status=404)]
        events.event(WEB, WARNING, "KernelRefused", "refused")
        assert results.wait_for(2) == ["created", "created"]
    assert [body["count"] for _, body in sink.created] == [1, 2]


def test_the_recorder_s_thread_outlives_an_error_of_any_kind(results: Results) -> None:
    sink = Sink()
    with recorder(sink, results) as events:
        sink.answers = [RuntimeError("a bug in the client")]
        events.event(WEB, WARNING, "KernelRefused", "refused")
        events.event(WEB, WARNING, "KernelRefused", "next")
        assert results.wait_for(2) == ["failed", "created"]
