"""Events to the API server from a worker of their own, so that no sync ever waits for one.

``event`` only puts the event in a bounded queue (1,000, as client-go's broadcaster) and
drops it when the queue is full; ``run``, the daemon's supervised "events" worker,
correlates it (``EventCorrelator``) and writes it. As client-go's recordToSink does, a write
that got no answer is tried again (up to 12 times, 10 s apart, the first wait drawn shorter
so that nodes do not retry together), and one the API server refused is dropped with one
log line. A patch of an event that no longer exists becomes a create.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
from collections.abc import Callable

from ipvsproxy.cluster.connection import ApiError
from ipvsproxy.cluster.events import (
    Event,
    EventCorrelator,
    EventSink,
    EventSource,
    EventWrite,
    ObjectReference,
)

log = logging.getLogger(__name__)

QUEUE_SIZE = 1000
MAX_TRIES = 12
RETRY_DELAY = 10.0
NOT_FOUND = 404


class EventRecorder:
    def __init__(
        self,
        sink: EventSink,
        source: EventSource,
        *,
        correlator: EventCorrelator | None = None,
        queue_size: int = QUEUE_SIZE,
        retry_delay: float = RETRY_DELAY,
        counted: Callable[[str], None] = lambda result: None,
        draw: Callable[[], float] = random.random,
    ) -> None:
        """``counted`` is told each event's fate: created, patched, filtered (by the spam
        filter), dropped (the queue was full) or failed."""
        self._sink = sink
        self._correlator = correlator or EventCorrelator(source)
        self._queue: queue.Queue[Event] = queue.Queue(maxsize=queue_size)
        self._retry_delay = retry_delay
        self._counted = counted
        self._draw = draw
        self._stop = threading.Event()

    def event(self, involved: ObjectReference, type_: str, reason: str, message: str) -> None:
        """Queue an event; never blocks."""
        try:
            self._queue.put_nowait(Event(involved, type_, reason, message))
        except queue.Full:
            self._counted("dropped")
            log.debug("too many events queued; dropped %s %s: %s", reason, involved, message)

    def stop(self) -> None:
        """Ask ``run`` to return (at once, or after the write in hand); what is still queued
        is dropped."""
        self._stop.set()

    def run(self) -> None:
        """Write queued events until ``stop``; an event that cannot be written is dropped,
        whatever the client raises."""
        while not self._stop.is_set():
            try:
                event = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            try:
                write = self._correlator.correlate(event)
                if write is None:
                    self._counted("filtered")
                else:
                    self._counted(self._record(write))
            # Whatever the client raises, this thread goes on with the next event.
            except Exception:
                log.exception("recording event %s %s", event.reason, event.involved)
                self._counted("failed")

    def _record(self, write: EventWrite) -> str:
        """Write with retries; the result's name."""
        for attempt in range(MAX_TRIES):
            try:
                return self._write(write)
            except ApiError as error:
                if error.status is not None:
                    log.warning("the API server refused an event: %s", error)
                    return "failed"
                log.debug("event not written (try %d): %s", attempt + 1, error)
            delay = self._retry_delay * (self._draw() if attempt == 0 else 1.0)
            if self._stop.wait(delay):
                break
        log.warning("an event could not be written after %d tries; dropped", MAX_TRIES)
        return "failed"

    def _write(self, write: EventWrite) -> str:
        if write.patch is not None:
            try:
                self._sink.patch(write.namespace, write.name, write.patch)
                return "patched"
            except ApiError as error:
                if error.status != NOT_FOUND:
                    raise
        self._sink.create(write.namespace, write.body)
        return "created"
