"""A fake Kubernetes API server over real HTTP on 127.0.0.1, for the real ``kubernetes`` client.

It keeps the parts of the API's list/watch contract that a proxy relies on:

* one resourceVersion counter across kinds, bumped by every write, as etcd does;
* lists with ``labelSelector``, ``limit`` and ``continue`` served from a consistent snapshot,
  ``metadata.resourceVersion`` on every page, and items without kind/apiVersion;
* ``GET /api/v1/nodes/NAME``, with the API's Status JSON (404 NotFound) when missing;
* watches (``?watch=true&resourceVersion=N&allowWatchBookmarks=true``) streaming
  ADDED/MODIFIED/DELETED/BOOKMARK events as newline-delimited JSON over chunked encoding, and an
  ERROR event carrying a 410 Status when N is older than the retained history;
* bearer-token authentication (401 Status otherwise);
* Events written as the kubelet writes them: ``POST /api/v1/namespaces/NS/events`` (409
  AlreadyExists for a name taken) and strategic-merge ``PATCH .../events/NAME`` of their
  count, message and lastTimestamp (404 when missing), kept apart from the watched kinds.

Tests drive it through hooks: ``apply``/``delete`` objects, read ``recorded_events``,
``fail_next`` requests with a status,
``expire_continue_tokens``, ``compact`` the watch history, ``bookmark``, ``stall``/``resume``,
``drop_connections`` and ``restart`` on the same port. Some send what a real API server never
would, for the client's defences: ``answer_watches_with_gone``, ``send_raw`` lines on watches,
``chunk_watch_events`` into small HTTP chunks.
"""

from __future__ import annotations

import bisect
import contextlib
import copy
import itertools
import json
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

TOKEN = "fake-apiserver-token"
# Bounds every wait so that a forgotten stall never hangs a test run.
MAX_WAIT = 30.0

JsonObject = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Kind:
    name: str
    api_version: str
    path: str
    namespaced: bool = True


SERVICE = Kind("Service", "v1", "/api/v1/services")
ENDPOINT_SLICE = Kind(
    "EndpointSlice", "discovery.k8s.io/v1", "/apis/discovery.k8s.io/v1/endpointslices"
)
NODE = Kind("Node", "v1", "/api/v1/nodes", namespaced=False)
KINDS = {kind.name: kind for kind in (SERVICE, ENDPOINT_SLICE, NODE)}
_BY_PATH = {kind.path: kind for kind in KINDS.values()}

ObjectId = tuple[str, str, str]  # kind, namespace, name


@dataclass(frozen=True, slots=True)
class Event:
    resource_version: int
    type: str
    object: JsonObject


@dataclass(frozen=True, slots=True)
class Request:
    """One request as the server saw it, for tests to assert on."""

    path: str
    query: Mapping[str, str]
    method: str = "GET"


@dataclass(slots=True)
class _Failure:
    remaining: int
    status: int
    retry_after: int | None


@dataclass(slots=True)
class _State:
    """Everything that survives a restart, as etcd would; guarded by ``changed``."""

    changed: threading.Condition = field(default_factory=threading.Condition)
    objects: dict[ObjectId, JsonObject] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    resource_version: int = 100
    # Watches from a resourceVersion below this one get 410 Gone.
    oldest_watchable: int = 0
    snapshots: dict[int, list[JsonObject]] = field(default_factory=dict)
    # Events (the API kind) by namespace and name.
    kube_events: dict[tuple[str, str], JsonObject] = field(default_factory=dict)
    snapshot_ids: Iterator[int] = field(default_factory=itertools.count)
    failures: list[_Failure] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    bookmarks: int = 0
    open_watches: int = 0
    stalled: bool = False
    # Seconds between the bytes of each answer body; 0 sends it whole.
    trickle: float = 0.0
    # Bumped to end every open watch stream abruptly.
    drops: int = 0
    # Every watch answered with 410 Gone, whatever its resourceVersion.
    gone_watches: bool = False
    # (kind name, line): sent as they are on the watches of that kind open when added.
    raw_lines: list[tuple[str, bytes]] = field(default_factory=list)
    # Bytes per HTTP chunk of a watch event; 0 sends each event in one chunk.
    chunk_size: int = 0


@dataclass(slots=True)
class _Cursor:
    """Where one watch stream is: the last resourceVersion sent and the hooks seen so far."""

    position: int
    bookmarks: int
    drops: int
    raw_lines: int

    def has_news(self, state: _State) -> bool:
        if state.drops != self.drops:
            return True
        if state.stalled:
            return False
        # Events are kept in resourceVersion order: the newest says whether any is news.
        return (
            state.bookmarks != self.bookmarks
            or len(state.raw_lines) != self.raw_lines
            or (bool(state.events) and state.events[-1].resource_version > self.position)
        )


def _events_namespace(path: str) -> str | None:
    """NS of ``/api/v1/namespaces/NS/events``, else None."""
    parts = path.split("/")
    if len(parts) == 6 and parts[:4] == ["", "api", "v1", "namespaces"] and parts[5] == "events":
        return parts[4]
    return None


def status_body(code: int, reason: str, message: str) -> JsonObject:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    404: "NotFound",
    410: "Expired",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
}


def _matches(labels: Mapping[str, str], selector: str) -> bool:
    """Equality-based selectors (``k``, ``!k``, ``k=v``, ``k==v``, ``k!=v``), labels or fields."""
    for requirement in filter(None, (part.strip() for part in selector.split(","))):
        if "!=" in requirement:
            key, value = requirement.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in requirement:
            key, value = requirement.replace("==", "=").split("=", 1)
            if labels.get(key) != value:
                return False
        elif requirement.startswith("!"):
            if requirement[1:] in labels:
                return False
        elif requirement not in labels:
            return False
    return True


def _labels(obj: JsonObject) -> Mapping[str, str]:
    labels = obj.get("metadata", {}).get("labels") or {}
    return labels if isinstance(labels, dict) else {}


def _fields(obj: JsonObject) -> Mapping[str, str]:
    metadata = obj["metadata"]
    return {"metadata.name": metadata["name"], "metadata.namespace": metadata.get("namespace", "")}


@dataclass(frozen=True, slots=True)
class _Query:
    """The filters of one list or watch request."""

    kind: Kind
    labels: str = ""
    fields: str = ""

    def selects(self, obj: JsonObject) -> bool:
        return (
            obj.get("kind", self.kind.name) == self.kind.name
            and _matches(_labels(obj), self.labels)
            and _matches(_fields(obj), self.fields)
        )


def query_flag(query: Mapping[str, str], name: str) -> bool:
    """A boolean query parameter as kube-apiserver reads one (apimachinery's
    Convert_Slice_string_To_bool): absent, "0" or "false" in any case is false, anything else
    true. The kubernetes client 29 sends Python's "True"; 37 sends "true"."""
    value = query.get(name)
    return value is not None and value.lower() not in ("0", "false")


def _sort_key(obj: JsonObject) -> tuple[str, str]:
    metadata = obj["metadata"]
    return (metadata.get("namespace", ""), metadata["name"])


class FakeApiServer:
    """Serve ``_State`` on 127.0.0.1; ``start`` picks a free port that ``restart`` keeps."""

    def __init__(self) -> None:
        self._state = _State()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        self.port = 0
        # Called with each request before it is served, outside the state lock.
        self.on_request: Callable[[Request], None] | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeApiServer:
        server = _Server(("127.0.0.1", self.port), _Handler)
        server.fake = self
        self._server = server
        self.port = server.server_address[1]
        self._thread = threading.Thread(
            target=server.serve_forever, args=(0.05,), name="fake-apiserver"
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and cut every open connection, watches included."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        self.drop_connections()
        if self._thread is not None:
            self._thread.join(MAX_WAIT)
        self._server = None

    def restart(self) -> None:
        """Stop, then serve the same state again on the same port."""
        self.stop()
        self.start()

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.resume()
        self.stop()

    def write_kubeconfig(self, path: Path, token: str = TOKEN) -> Path:
        """A kubeconfig whose current context points at this server with ``token``."""
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
            "current-context": "fake",
        }
        path.write_text(json.dumps(kubeconfig), encoding="utf-8")
        return path

    # -- hooks for tests -----------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        with self._state.changed:
            return self._state.resource_version

    @property
    def open_watches(self) -> int:
        with self._state.changed:
            return self._state.open_watches

    @property
    def requests(self) -> list[Request]:
        with self._state.changed:
            return list(self._state.requests)

    def recorded_events(self) -> list[JsonObject]:
        """The Events written so far, as stored, in the order they were created."""
        with self._state.changed:
            return copy.deepcopy(list(self._state.kube_events.values()))

    def apply(self, obj: Mapping[str, Any]) -> JsonObject:
        """Create or replace an object (by kind, namespace, name); returns it as stored, with
        the uid the server gave it when it was created."""
        stored: JsonObject = copy.deepcopy(dict(obj))
        kind = KINDS[stored["kind"]]
        stored["apiVersion"] = kind.api_version
        metadata = stored.setdefault("metadata", {})
        if kind.namespaced:
            metadata.setdefault("namespace", "default")
        object_id = (kind.name, metadata.get("namespace", ""), metadata["name"])
        with self._state.changed:
            existing = self._state.objects.get(object_id)
            event_type = "MODIFIED" if existing is not None else "ADDED"
            # As the API server: a uid of its own, the same for the object's whole life.
            metadata["uid"] = (
                existing["metadata"]["uid"] if existing is not None else str(uuid.uuid4())
            )
            return copy.deepcopy(self._record(event_type, object_id, stored))

    def delete(self, kind: str, namespace: str, name: str) -> None:
        object_id = (kind, namespace if KINDS[kind].namespaced else "", name)
        with self._state.changed:
            self._record("DELETED", object_id, self._state.objects[object_id])

    def fail_next(self, count: int, status: int, retry_after: int | None = None) -> None:
        """Answer the next ``count`` requests (any path) with a Status of ``status``."""
        with self._state.changed:
            self._state.failures.append(_Failure(count, status, retry_after))

    def expire_continue_tokens(self) -> None:
        with self._state.changed:
            self._state.snapshots.clear()

    def compact(self) -> None:
        """Forget the watch history: watches from an older resourceVersion get 410 Gone."""
        with self._state.changed:
            self._state.oldest_watchable = self._state.resource_version
            self._state.events.clear()

    def bookmark(self) -> None:
        """Send a BOOKMARK at the current resourceVersion on every watch that asked for them."""
        with self._state.changed:
            self._state.bookmarks += 1
            self._state.changed.notify_all()

    def stall(self) -> None:
        """Hold every new request, and keep open watches silent, until ``resume``."""
        with self._state.changed:
            self._state.stalled = True

    def trickle(self, interval: float) -> None:
        """Send every answer's body one byte at a time, ``interval`` seconds apart."""
        with self._state.changed:
            self._state.trickle = interval

    def answer_watches_with_gone(self) -> None:
        """Answer every watch from now on with an ERROR event carrying 410 Gone."""
        with self._state.changed:
            self._state.gone_watches = True

    def send_raw(self, kind: str, line: bytes) -> None:
        """Send ``line`` as it is (a newline added) on every open watch of ``kind``."""
        with self._state.changed:
            self._state.raw_lines.append((kind, line + b"\n"))
            self._state.changed.notify_all()

    def chunk_watch_events(self, size: int) -> None:
        """Send each watch event from now on in HTTP chunks of ``size`` bytes."""
        with self._state.changed:
            self._state.chunk_size = size

    def resume(self) -> None:
        with self._state.changed:
            self._state.stalled = False
            self._state.changed.notify_all()

    def drop_connections(self) -> None:
        """Cut every open connection mid-stream, as a crashing server or a proxy would."""
        with self._state.changed:
            self._state.drops += 1
            self._state.changed.notify_all()
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    # -- internals shared with the handler -----------------------------------------------------

    def _record(self, event_type: str, object_id: ObjectId, obj: JsonObject) -> JsonObject:
        self._state.resource_version += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self._state.resource_version)
        if event_type == "DELETED":
            del self._state.objects[object_id]
        else:
            self._state.objects[object_id] = obj
        self._state.events.append(Event(self._state.resource_version, event_type, obj))
        self._state.changed.notify_all()
        return obj

    def _track(self, connection: socket.socket, open_: bool) -> None:
        with self._connections_lock:
            if open_:
                self._connections.add(connection)
            else:
                self._connections.discard(connection)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    fake: FakeApiServer

    def process_request(self, request: Any, client_address: Any) -> None:
        self.fake._track(request, open_=True)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        self.fake._track(request, open_=False)
        super().shutdown_request(request)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: pytest shows the requests through ``FakeApiServer.requests`` when needed."""

    @property
    def fake(self) -> FakeApiServer:
        return self.server.fake

    @property
    def state(self) -> _State:
        return self.server.fake._state

    def _admit(self, method: str) -> Request | None:
        """Record the request, then answer it if a failure is due or it is not authorised;
        the request when it is the handler's to answer."""
        url = urlsplit(self.path)
        query = {key: values[-1] for key, values in parse_qs(url.query).items()}
        request = Request(url.path, query, method)
        if self.fake.on_request is not None:
            self.fake.on_request(request)
        with self.state.changed:
            self.state.requests.append(request)
            self.state.changed.wait_for(lambda: not self.state.stalled, MAX_WAIT)
            failure = self._take_failure()
        if failure is not None:
            code = failure.status
            headers = (
                {"Retry-After": str(failure.retry_after)} if failure.retry_after is not None else {}
            )
            self._send_json(
                code, status_body(code, _REASONS.get(code, "Unknown"), "injected"), headers
            )
            return None
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self._send_json(401, status_body(401, "Unauthorized", "Unauthorized"))
            return None
        return request

    def _body(self) -> JsonObject | None:
        data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(data)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            self._send_json(400, status_body(400, "BadRequest", "the body is not a JSON object"))
            return None
        return body

    def do_POST(self) -> None:
        request = self._admit("POST")
        if request is None:
            return
        namespace = _events_namespace(request.path)
        body = self._body() if namespace is not None else None
        if namespace is None or body is None:
            if namespace is None:
                self._send_json(405, status_body(405, "MethodNotAllowed", "not an events path"))
            return
        metadata = body.get("metadata") or {}
        involved = body.get("involvedObject") or {}
        if metadata.get("namespace", namespace) != namespace or involved.get("namespace") != (
            namespace
        ):
            message = "does not match the namespace of the event"
            self._send_json(422, status_body(422, "Invalid", message))
            return
        with self.state.changed:
            name = (namespace, str(metadata.get("name", "")))
            if name in self.state.kube_events:
                message = f'events "{name[1]}" already exists'
                self._send_json(409, status_body(409, "AlreadyExists", message))
                return
            stored = copy.deepcopy(body)
            stored["metadata"] = {**metadata, "namespace": namespace, "uid": str(uuid.uuid4())}
            self.state.kube_events[name] = stored
        self._send_json(201, stored)

    def do_PATCH(self) -> None:
        request = self._admit("PATCH")
        if request is None:
            return
        namespace, _, name = request.path.rpartition("/")
        if _events_namespace(namespace) is None:
            self._send_json(405, status_body(405, "MethodNotAllowed", "not an event's path"))
            return
        if self.headers.get("Content-Type") != "application/strategic-merge-patch+json":
            self._send_json(415, status_body(415, "UnsupportedMediaType", "not a patch"))
            return
        patch = self._body()
        if patch is None:
            return
        with self.state.changed:
            stored = self.state.kube_events.get((_events_namespace(namespace) or "", name))
            if stored is not None:
                stored.update(copy.deepcopy(patch))
                answer = copy.deepcopy(stored)
        if stored is None:
            self._send_json(404, status_body(404, "NotFound", f'events "{name}" not found'))
        else:
            self._send_json(200, answer)

    def do_GET(self) -> None:
        request = self._admit("GET")
        if request is None:
            return
        url = urlsplit(self.path)
        query = request.query
        kind = _BY_PATH.get(url.path)
        selected = (
            _Query(kind, query.get("labelSelector", ""), query.get("fieldSelector", ""))
            if kind is not None
            else None
        )
        if selected is not None and query_flag(query, "watch"):
            self._watch(selected, query)
        elif selected is not None:
            self._list(selected, query)
        elif url.path.startswith(NODE.path + "/"):
            self._get(NODE, url.path.removeprefix(NODE.path + "/"))
        else:
            self._send_json(
                404,
                status_body(404, "NotFound", "the server could not find the requested resource"),
            )

    def _take_failure(self) -> _Failure | None:
        while self.state.failures and self.state.failures[0].remaining == 0:
            self.state.failures.pop(0)
        if not self.state.failures:
            return None
        self.state.failures[0].remaining -= 1
        return self.state.failures[0]

    def _send_json(
        self, code: int, body: JsonObject, headers: Mapping[str, str] | None = None
    ) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if not self.state.trickle:
            self.wfile.write(data)
            return
        with contextlib.suppress(OSError):  # the client gave up: the point of trickling
            for index in range(len(data)):
                self.wfile.write(data[index : index + 1])
                self.wfile.flush()
                time.sleep(self.state.trickle)

    def _get(self, kind: Kind, name: str) -> None:
        with self.state.changed:
            obj = self.state.objects.get((kind.name, "", name))
            found = copy.deepcopy(obj) if obj is not None else None
        if found is None:
            message = f'{kind.name.lower()}s "{name}" not found'
            self._send_json(404, status_body(404, "NotFound", message))
        else:
            self._send_json(200, found)

    def _list(self, selected: _Query, query: Mapping[str, str]) -> None:
        limit = int(query.get("limit") or 0)
        token = query.get("continue", "")
        with self.state.changed:
            if token:
                snapshot_id, version, offset_text = token.split(":")
                items = self.state.snapshots.get(int(snapshot_id))
                if items is None:
                    message = (
                        "The provided continue parameter is too old to display a consistent list."
                    )
                    self._send_json(410, status_body(410, "Expired", message))
                    return
                offset = int(offset_text)
            else:
                version = str(self.state.resource_version)
                items = sorted(
                    (copy.deepcopy(o) for o in self.state.objects.values() if selected.selects(o)),
                    key=_sort_key,
                )
                offset = 0
            end = offset + limit if limit else len(items)
            metadata: JsonObject = {"resourceVersion": version}
            if end < len(items):
                snapshot_id = str(next(self.state.snapshot_ids))
                self.state.snapshots[int(snapshot_id)] = items
                metadata["continue"] = f"{snapshot_id}:{version}:{end}"
                metadata["remainingItemCount"] = len(items) - end
        page = [
            {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}
            for obj in items[offset:end]
        ]
        body = {
            "kind": f"{selected.kind.name}List",
            "apiVersion": selected.kind.api_version,
            "metadata": metadata,
            "items": page,
        }
        self._send_json(200, body)

    def _watch(self, selected: _Query, query: Mapping[str, str]) -> None:
        bookmarks = query_flag(query, "allowWatchBookmarks")
        timeout = min(float(query.get("timeoutSeconds") or MAX_WAIT), MAX_WAIT)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for event in self._events(
                selected, query.get("resourceVersion", ""), bookmarks, timeout
            ):
                line = event if isinstance(event, bytes) else json.dumps(event).encode() + b"\n"
                size = self.state.chunk_size or len(line)
                for start in range(0, len(line), size):
                    self._send_chunk(line[start : start + size])
            self._send_chunk(b"")
        except OSError:
            self.close_connection = True

    def _send_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _events(
        self, selected: _Query, since: str, bookmarks: bool, timeout: float
    ) -> Iterator[JsonObject | bytes]:
        """Events after ``since`` (and raw lines) until the timeout, a drop (which raises) or a
        410."""
        state = self.state
        with state.changed:
            cursor = _Cursor(0, state.bookmarks, state.drops, len(state.raw_lines))
            if state.gone_watches:
                message = f"too old resource version: {since} (answering every watch so)"
                yield {"type": "ERROR", "object": status_body(410, "Expired", message)}
                return
            if since in ("", "0"):
                cursor.position = state.resource_version
                initial = [copy.deepcopy(o) for o in state.objects.values() if selected.selects(o)]
            else:
                cursor.position, initial = int(since), []
                if cursor.position < state.oldest_watchable:
                    message = f"too old resource version: {since} ({state.oldest_watchable})"
                    yield {"type": "ERROR", "object": status_body(410, "Expired", message)}
                    return
            state.open_watches += 1
        deadline = threading.Event()
        timer = threading.Timer(timeout, self._wake, args=(deadline,))
        timer.start()
        try:
            for obj in initial:
                yield {"type": "ADDED", "object": obj}
            while True:
                with state.changed:
                    # A stalled server holds its streams open past their timeout, as a hung one.
                    state.changed.wait_for(
                        lambda: cursor.has_news(state) or (deadline.is_set() and not state.stalled),
                        MAX_WAIT,
                    )
                    if state.drops != cursor.drops:
                        raise ConnectionAbortedError("dropped by the test")
                    if state.stalled:
                        continue
                    # O(news), not O(history): the bench's clusters keep 20,000 events.
                    first = bisect.bisect_right(
                        state.events, cursor.position, key=lambda e: e.resource_version
                    )
                    pending = state.events[first:]
                    raw = [
                        line
                        for kind, line in state.raw_lines[cursor.raw_lines :]
                        if kind == selected.kind.name
                    ]
                    cursor.raw_lines = len(state.raw_lines)
                    bookmark_due = state.bookmarks != cursor.bookmarks
                    cursor.bookmarks = state.bookmarks
                    current = state.resource_version
                for event in pending:
                    cursor.position = event.resource_version
                    if selected.selects(event.object):
                        yield {"type": event.type, "object": copy.deepcopy(event.object)}
                yield from raw
                if bookmarks and bookmark_due:
                    cursor.position = max(cursor.position, current)
                    marker = {
                        "kind": selected.kind.name,
                        "apiVersion": selected.kind.api_version,
                        "metadata": {"resourceVersion": str(current)},
                    }
                    yield {"type": "BOOKMARK", "object": marker}
                if deadline.is_set():
                    return
        finally:
            timer.cancel()
            with state.changed:
                state.open_watches -= 1

    def _wake(self, deadline: threading.Event) -> None:
        deadline.set()
        with self.state.changed:
            self.state.changed.notify_all()
