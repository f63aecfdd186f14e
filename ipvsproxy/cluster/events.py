"""Kubernetes Events about the objects the proxy serves, correlated as the kubelet's are.

What client-go's ``tools/record`` EventCorrelator does before an event reaches the API server,
with its defaults:

* aggregation: events about one object with one type and reason but different messages,
  more than 10 of them within 10 minutes, become one event whose message says it is
  "(combined from similar events)", patched from then on;
* deduplication: an event seen before (same object, type, reason and message) is not created
  again: the existing one is patched with its count and last timestamp;
* spam filter: each object may have 25 events at once, then one more every 5 minutes (a
  token bucket per source and object); the rest are dropped.

Each of the three keeps at most 4096 keys, least recently used first out, so what a flood of
events can make the proxy hold is bounded. Pure: the API writes are ``ApiEventSink``'s.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Generic, Protocol, TypeVar
from urllib.parse import quote

from ipvsproxy.cluster.connection import ApiConnection, Request, request_json

JsonObject = dict[str, Any]
NORMAL = "Normal"
WARNING = "Warning"
CACHE_SIZE = 4096
SPAM_BURST = 25
SPAM_QPS = 1.0 / 300.0
AGGREGATE_MAX_EVENTS = 10
AGGREGATE_INTERVAL = 600.0
AGGREGATED_PREFIX = "(combined from similar events): "
# The API server refuses longer messages from the events.k8s.io API; keep to it everywhere.
MAX_MESSAGE = 1024
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


@dataclass(frozen=True, slots=True)
class ObjectReference:
    kind: str
    namespace: str
    name: str
    uid: str = ""
    api_version: str = "v1"


@dataclass(frozen=True, slots=True)
class EventSource:
    component: str
    host: str


@dataclass(frozen=True, slots=True)
class Event:
    involved: ObjectReference
    type: str  # NORMAL or WARNING
    reason: str  # UpperCamelCase, for machines
    message: str  # for people


@dataclass(frozen=True, slots=True)
class EventWrite:
    """One event to the API server: patch ``patch`` into the event named ``name`` when it is
    not None (and create ``body`` if that event is gone), else create ``body``."""

    namespace: str
    name: str
    body: JsonObject
    patch: JsonObject | None


K = TypeVar("K")
V = TypeVar("V")


class _LRU(Generic[K, V]):
    def __init__(self, size: int) -> None:
        self._size = size
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        if len(self._items) > self._size:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


@dataclass(slots=True)
class _TokenBucket:
    tokens: float
    updated: float

    def take(self, now: float, burst: int, qps: float) -> bool:
        self.tokens = min(float(burst), self.tokens + (now - self.updated) * qps)
        self.updated = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


@dataclass(slots=True)
class _Similar:
    messages: set[str]
    last: float


@dataclass(frozen=True, slots=True)
class _Seen:
    count: int
    first: float
    name: str


def _timestamp(seconds: float) -> str:
    return datetime.fromtimestamp(int(seconds), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventCorrelator:
    """Not thread-safe: one recorder thread uses it."""

    def __init__(
        self,
        source: EventSource,
        clock: Callable[[], float] = time.time,
        *,
        cache_size: int = CACHE_SIZE,
        burst: int = SPAM_BURST,
        qps: float = SPAM_QPS,
    ) -> None:
        self._source = source
        self._clock = clock
        self._burst = burst
        self._qps = qps
        self._similar: _LRU[tuple[object, ...], _Similar] = _LRU(cache_size)
        self._seen: _LRU[tuple[object, ...], _Seen] = _LRU(cache_size)
        self._buckets: _LRU[ObjectReference, _TokenBucket] = _LRU(cache_size)

    def correlate(self, event: Event) -> EventWrite | None:
        """The write that records ``event``; None when the spam filter drops it."""
        now = self._clock()
        event = replace(event, message=event.message[:MAX_MESSAGE])
        group = (event.involved, event.type, event.reason)
        similar = self._similar.get(group)
        if similar is None or now - similar.last > AGGREGATE_INTERVAL:
            similar = _Similar(set(), now)
        similar.messages.add(event.message)
        similar.last = now
        self._similar.put(group, similar)
        key: tuple[object, ...] = (*group, event.message)
        if len(similar.messages) >= AGGREGATE_MAX_EVENTS:
            similar.messages.pop()  # bounded, as client-go's
            combined = (AGGREGATED_PREFIX + event.message)[:MAX_MESSAGE]
            event = replace(event, message=combined)
            key = group
        seen = self._seen.get(key)
        if seen is None:
            seen = _Seen(1, now, f"{event.involved.name}.{time.time_ns():x}")
        else:
            seen = replace(seen, count=seen.count + 1)
        self._seen.put(key, seen)
        bucket = self._buckets.get(event.involved)
        if bucket is None:
            bucket = _TokenBucket(float(self._burst), now)
            self._buckets.put(event.involved, bucket)
        if not bucket.take(now, self._burst, self._qps):
            return None
        body = self._body(event, seen, now)
        patch = (
            {"count": seen.count, "lastTimestamp": _timestamp(now), "message": event.message}
            if seen.count > 1
            else None
        )
        return EventWrite(event.involved.namespace, seen.name, body, patch)

    def _body(self, event: Event, seen: _Seen, now: float) -> JsonObject:
        involved = event.involved
        reference = {
            "kind": involved.kind,
            "namespace": involved.namespace,
            "name": involved.name,
            "apiVersion": involved.api_version,
        }
        if involved.uid:
            reference["uid"] = involved.uid
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": seen.name, "namespace": involved.namespace},
            "involvedObject": reference,
            "type": event.type,
            "reason": event.reason,
            "message": event.message,
            "source": {"component": self._source.component, "host": self._source.host},
            "firstTimestamp": _timestamp(seen.first),
            "lastTimestamp": _timestamp(now),
            "count": seen.count,
            "reportingComponent": self._source.component,
            "reportingInstance": self._source.host,
        }


class EventSink(Protocol):
    """Where event writes go; ApiError (its ``status`` None when no answer came) if refused."""

    def create(self, namespace: str, body: JsonObject) -> None: ...

    def patch(self, namespace: str, name: str, patch: JsonObject) -> None: ...


class ApiEventSink:
    """Events in the core API (``/api/v1/namespaces/NS/events``), as the kubelet writes them."""

    def __init__(self, api: ApiConnection) -> None:
        self._api = api

    def create(self, namespace: str, body: JsonObject) -> None:
        request = Request("POST", _events_path(namespace), body=body)
        request_json(self._api, "creating an Event", request)

    def patch(self, namespace: str, name: str, patch: JsonObject) -> None:
        path = f"{_events_path(namespace)}/{quote(name, safe='')}"
        request = Request("PATCH", path, body=patch, content_type=STRATEGIC_MERGE_PATCH)
        request_json(self._api, "patching an Event", request)


def _events_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{quote(namespace, safe='')}/events"
