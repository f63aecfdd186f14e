"""The daemon's HTTP servers (/healthz and /livez, /metrics, health-check node ports), all
served by one HttpHub: one event-loop thread for every listening socket and connection, and a
few handler threads. Whoever can open TCP connections to the node must not be able to make the
proxy hold more than that, however many connections they open or how slowly they talk:

* at most ``max_connections`` connections in all; a new one beyond that closes the oldest
  connection whose request is not yet being answered (an idle or slow client), so a probe that
  sends its request at once is answered while others flood;
* a request's head must arrive within ``request_timeout``, its answer be taken within
  ``response_timeout``; a connection that lingers beyond is closed;
* each listener answers one request at a time (a slow /metrics never delays /healthz), on
  ``handler_threads`` threads for all, and holds at most ``max_pending_output`` bytes of
  answers not yet taken;
* when the process runs out of descriptors, accepting pauses (5 ms doubling to 1 s, as Go's
  http.Server) and the oldest idle connection is let go, instead of spinning on accept;
* a client that resets its connection, also in the middle of an answer, is not an error.

Every method is answered by a path's handler, as kube-proxy's handlers do; HEAD without body.
Each answer closes its connection (HTTP/1.1 ``Connection: close``).
"""

from __future__ import annotations

import contextlib
import email.utils
import errno
import heapq
import itertools
import logging
import queue
import re
import selectors
import socket
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from functools import partial
from http import HTTPStatus
from typing import TypeVar
from urllib.parse import urlsplit

from ipvsproxy.defaults import UNSPECIFIED_HOSTS
from ipvsproxy.supervise import Supervisor, Worker, stop_all

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    content_type: str
    body: bytes


Handler = Callable[[], Response]
# Answers every path under a prefix ("/owners/"), given the rest of the path.
PathHandler = Callable[[str], Response]
# A route for every path no other route names (kube-proxy's health-check ports answer any path).
ANY_PATH = "*"
TEXT = "text/plain; charset=utf-8"


# accept() errors that say the process or the system is out of something: wait, then retry.
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_ACCEPT_PAUSE_FIRST, _ACCEPT_PAUSE_MAX = 0.005, 1.0
# RFC 9110's token: what a method may be made of.
_METHOD = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_ACCEPTS_PER_WAKEUP = 64
_REASONS = {status.value: status.phrase for status in HTTPStatus}
_RECV_SIZE = 16 * 1024


@dataclass(frozen=True, slots=True)
class HttpLimits:
    max_connections: int = 1024
    request_timeout: float = 10.0
    response_timeout: float = 30.0
    max_request_head: int = 16 * 1024
    max_pending_output: int = 64 * 1024 * 1024
    handler_threads: int = 4
    # After an answer, how long the rest of a request (a body we never read) is read and dropped
    # before closing, so that closing does not reset the connection under the client's feet.
    linger: float = 2.0

    @classmethod
    def for_open_files(cls, soft_limit: int) -> HttpLimits:
        """A quarter of the descriptors for HTTP connections, the rest for the proxy's own
        work (netlink, iptables-restore, the API, manifests); from 16 to 1024."""
        return cls(max_connections=max(16, min(1024, soft_limit // 4)))


class _State(Enum):
    READING = "reading"  # the request's head is arriving
    QUEUED = "queued"  # waiting for its listener's previous request to be answered
    HANDLING = "handling"  # a handler thread is answering it
    WRITING = "writing"  # the answer is being sent
    LINGERING = "lingering"  # answered; the rest of the request is read and dropped


NOTHING_TO_SEND = memoryview(b"")
# Why connections were closed before their answer was taken, as the metrics count them.
DROP_REASONS = ("evicted", "refused", "timeout")


@dataclass(eq=False)
class _Listener:
    socket: socket.socket
    routes: Mapping[str, Handler]
    port: int
    prefixes: Mapping[str, PathHandler] = field(default_factory=dict)
    # The connection whose request a handler thread is answering.
    handling: _Connection | None = None
    waiting: deque[_Connection] = field(default_factory=deque)
    pending_output: int = 0
    closed: bool = False
    released: threading.Event = field(default_factory=threading.Event)


@dataclass(eq=False)
class _Connection:
    socket: socket.socket
    listener: _Listener
    deadline: float
    state: _State = _State.READING
    inbox: bytearray = field(default_factory=bytearray)
    method: bytes = b""
    handler: Handler | None = None
    outbox: memoryview = NOTHING_TO_SEND
    closed: bool = False

    @property
    def registered(self) -> bool:
        """Whether the event loop watches its socket."""
        return self.state in (_State.READING, _State.WRITING, _State.LINGERING)


class HttpListener:
    """One listening socket of a hub; ``close`` stops serving it and frees its port."""

    def __init__(self, hub: HttpHub, listener: _Listener) -> None:
        self._hub = hub
        self._listener = listener

    @property
    def port(self) -> int:
        return self._listener.port

    def close(self) -> None:
        self._hub.close_listener(self._listener)


def _listening_socket(host: str, port: int) -> socket.socket:
    dual_stack = host in UNSPECIFIED_HOSTS and socket.has_dualstack_ipv6()
    if dual_stack:
        host = "::"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if dual_stack:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((host, port))
        sock.listen(socket.SOMAXCONN)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def _under(prefixes: Mapping[str, PathHandler], path: str) -> Handler | None:
    for prefix, handler in prefixes.items():
        if path.startswith(prefix):
            return partial(handler, path.removeprefix(prefix))
    return None


def _head_end(inbox: bytearray) -> int:
    """The length of the request's head in ``inbox`` (blank line included), -1 if incomplete."""
    ends = [inbox.find(blank) + len(blank) for blank in (b"\r\n\r\n", b"\n\n") if blank in inbox]
    return min(ends, default=-1)


def request_line(head: bytes) -> tuple[bytes, str] | None:
    """(method, path) of a request's head; None if it is not HTTP/1.x."""
    parts = head.split(b"\n", 1)[0].rstrip(b"\r").split(b" ")
    if len(parts) != 3 or not _METHOD.fullmatch(parts[0]) or not parts[2].startswith(b"HTTP/1."):
        return None
    target = parts[1].decode("latin-1")
    if target.startswith(("http://", "https://")):
        target = urlsplit(target).path or "/"
    return parts[0], target.split("?", 1)[0]


def encode_answer(response: Response, method: bytes) -> bytes:
    """The bytes of an answer to ``method``: HEAD gets the head alone, as Go's servers do."""
    reason = _REASONS.get(response.status, "")
    head = (
        f"HTTP/1.1 {response.status} {reason}\r\n"
        f"Content-Type: {response.content_type}\r\n"
        "X-Content-Type-Options: nosniff\r\n"
        f"Content-Length: {len(response.body)}\r\n"
        f"Date: {email.utils.formatdate(usegmt=True)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode("latin-1")
    return head if method == b"HEAD" else head + response.body


_BAD_REQUEST = Response(400, TEXT, b"400 bad request\n")
_HEAD_TOO_LARGE = Response(431, TEXT, b"431 request header fields too large\n")
_NOT_FOUND = Response(404, TEXT, b"404 page not found\n")
_HANDLER_FAILED = Response(500, TEXT, b"500 internal server error\n")
# How long closing a listener waits for the event loop to let go of its socket.
_RELEASE_PATIENCE = 5.0


class HttpHub:
    """Serves every listener of the daemon from ``start`` until ``stop``.

    ``serve`` binds at once (an OSError says why it cannot) and may be called before or after
    ``start``, from any thread, as may ``HttpListener.close``, which frees the port before it
    returns. The event loop and the handler threads are workers of ``workers``.
    """

    def __init__(
        self,
        workers: Supervisor,
        limits: HttpLimits = HttpLimits(),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._workers = workers
        self.limits = limits
        self._clock = clock
        self._lock = threading.Lock()
        self._listeners: list[_Listener] = []
        self._closing: list[_Listener] = []
        self._listeners_changed = True
        self._loop_running = False
        self._stopped = False
        self._jobs: queue.SimpleQueue[_Connection | None] = queue.SimpleQueue()
        self._answered: queue.SimpleQueue[tuple[_Connection, bytes]] = queue.SimpleQueue()
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._wake_reader.setblocking(False)
        self._wake_writer.setblocking(False)
        self._started: list[Worker] = []
        # Connections closed before their answer was taken, by reason; and how often accepting
        # paused for want of descriptors. Written by the event loop, read by the metrics.
        self.dropped: dict[str, int] = dict.fromkeys(DROP_REASONS, 0)
        self.accept_pauses = 0
        # The event loop's own state, reset by each run.
        self._connections: set[_Connection] = set()
        self._unanswered: OrderedDict[_Connection, None] = OrderedDict()
        self._deadlines: list[tuple[float, int, _Connection]] = []
        self._sequence = itertools.count()
        self._accept_pause = 0.0
        self._accepting_again_at = 0.0

    @property
    def connections(self) -> int:
        return len(self._connections)

    # -- what other threads call ----------------------------------------------------------------

    def serve(
        self,
        host: str,
        port: int,
        routes: Mapping[str, Handler],
        prefixes: Mapping[str, PathHandler] | None = None,
    ) -> HttpListener:
        """Listen on ``host:port`` (port 0: any free port) and answer from ``routes``, and
        from ``prefixes`` for the paths under one that no route names."""
        sock = _listening_socket(host, port)
        listener = _Listener(sock, routes, int(sock.getsockname()[1]), dict(prefixes or {}))
        with self._lock:
            self._listeners.append(listener)
            self._listeners_changed = True
        self._wake()
        return HttpListener(self, listener)

    def close_listener(self, listener: _Listener) -> None:
        with self._lock:
            if listener.closed:
                return
            listener.closed = True
            self._listeners.remove(listener)
            self._listeners_changed = True
            if self._loop_running:
                self._closing.append(listener)
            else:
                listener.socket.close()
                listener.released.set()
        self._wake()
        if not listener.released.wait(_RELEASE_PATIENCE):
            log.warning("http: the event loop did not let go of port %d", listener.port)

    def start(self) -> None:
        """Run the event loop and the handler threads as workers (once)."""
        with self._lock:
            if self._started:
                return
            self._started = [self._workers.spawn("http", self._loop, stop=self._stop_loop)]
            self._started += [
                self._workers.spawn(f"http-handler-{n}", self._handle, stop=self._stop_handler)
                for n in range(self.limits.handler_threads)
            ]

    def stop(self) -> None:
        """Stop serving: every listener closed, every connection too."""
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            self.close_listener(listener)
        stop_all(self._started)
        self._wake_reader.close()
        self._wake_writer.close()

    # -- the workers --------------------------------------------------------------------------

    def _stop_loop(self) -> None:
        with self._lock:
            self._stopped = True
        self._wake()

    def _stop_handler(self) -> None:
        self._jobs.put(None)

    def _wake(self) -> None:
        # An OSError: already awake (its buffer is full), or stopped.
        with contextlib.suppress(OSError):
            self._wake_writer.send(b"\0")

    def _handle(self) -> None:
        """A handler thread: answer the requests the loop hands over, until told to stop."""
        while (connection := self._jobs.get()) is not None:
            assert connection.handler is not None
            try:
                response = connection.handler()
            except Exception:
                log.exception("http: the handler on port %d failed", connection.listener.port)
                response = _HANDLER_FAILED
            self._answered.put((connection, encode_answer(response, connection.method)))
            self._wake()

    def _loop(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self._wake_reader, selectors.EVENT_READ)
        registered: set[_Listener] = set()
        paused = False
        with self._lock:
            self._loop_running = True
            self._listeners_changed = True
        try:
            while True:
                with self._lock:
                    if self._stopped:
                        return
                    changed, self._listeners_changed = self._listeners_changed, False
                    listeners, closing = list(self._listeners), self._closing
                    self._closing = []
                self._release(selector, registered, closing)
                was_paused, paused = paused, self._clock() < self._accepting_again_at
                if changed or paused != was_paused:
                    wanted = set() if paused else set(listeners)
                    self._register_listeners(selector, registered, wanted)
                for key, events in selector.select(self._next_timeout()):
                    self._on_event(selector, key, events)
                self._take_answers(selector)
                self._expire(selector)
        finally:
            with self._lock:
                self._loop_running = False
                closing, self._closing = self._closing, []
            self._release(selector, registered, closing)
            for connection in list(self._connections):
                self._close(selector, connection)
            self._unanswered.clear()
            self._deadlines.clear()
            selector.close()

    # -- the event loop's own steps -------------------------------------------------------------

    def _release(
        self,
        selector: selectors.BaseSelector,
        registered: set[_Listener],
        closing: list[_Listener],
    ) -> None:
        """Let go of closed listeners: their sockets, their connections; then free the port."""
        for listener in closing:
            if listener in registered:
                selector.unregister(listener.socket)
                registered.discard(listener)
            for connection in [c for c in self._connections if c.listener is listener]:
                self._close(selector, connection)
            listener.socket.close()
            listener.released.set()

    @staticmethod
    def _register_listeners(
        selector: selectors.BaseSelector, registered: set[_Listener], wanted: set[_Listener]
    ) -> None:
        for gone in registered - wanted:
            selector.unregister(gone.socket)
            registered.discard(gone)
        for new in wanted - registered:
            selector.register(new.socket, selectors.EVENT_READ, new)
            registered.add(new)

    def _next_timeout(self) -> float:
        now = self._clock()
        moments = [now + 1.0]
        if self._deadlines:
            moments.append(self._deadlines[0][0])
        if self._accepting_again_at > now:
            moments.append(self._accepting_again_at)
        return max(0.0, min(moments) - now)

    def _on_event(
        self, selector: selectors.BaseSelector, key: selectors.SelectorKey, events: int
    ) -> None:
        if key.fileobj is self._wake_reader:
            try:
                while self._wake_reader.recv(4096):
                    pass
            except BlockingIOError:
                pass
        elif isinstance(key.data, _Listener):
            self._accept(selector, key.data)
        elif isinstance(key.data, _Connection) and not key.data.closed:
            if events & selectors.EVENT_WRITE:
                self._send(selector, key.data)
            elif events & selectors.EVENT_READ:
                self._receive(selector, key.data)

    def _accept(self, selector: selectors.BaseSelector, listener: _Listener) -> None:
        for _ in range(_ACCEPTS_PER_WAKEUP):
            try:
                sock, _ = listener.socket.accept()
            except BlockingIOError:
                return
            except OSError as error:
                if error.errno in _OUT_OF_RESOURCES:
                    self._pause_accepting(selector, error)
                else:
                    log.debug("http: accept on port %d: %s", listener.port, error)
                return
            self._accept_pause = 0.0
            if len(self._connections) >= self.limits.max_connections and not self._evict(selector):
                sock.close()
                self.dropped["refused"] += 1
                continue
            self._add(selector, sock, listener)

    def _pause_accepting(self, selector: selectors.BaseSelector, error: OSError) -> None:
        if not self._accept_pause:
            log.warning(
                "http: cannot accept connections: %s; pausing and closing an idle one",
                error.strerror,
            )
        self._accept_pause = min(
            max(self._accept_pause * 2, _ACCEPT_PAUSE_FIRST), _ACCEPT_PAUSE_MAX
        )
        self._accepting_again_at = self._clock() + self._accept_pause
        self.accept_pauses += 1
        self._evict(selector)

    def _evict(self, selector: selectors.BaseSelector) -> bool:
        """Close the oldest connection whose request is not being answered; False if none."""
        if not self._unanswered:
            return False
        self._close(selector, next(iter(self._unanswered)), "evicted")
        return True

    def _add(
        self, selector: selectors.BaseSelector, sock: socket.socket, listener: _Listener
    ) -> None:
        sock.setblocking(False)
        connection = _Connection(sock, listener, self._clock() + self.limits.request_timeout)
        self._connections.add(connection)
        self._unanswered[connection] = None
        self._push_deadline(connection)
        selector.register(sock, selectors.EVENT_READ, connection)

    def _push_deadline(self, connection: _Connection) -> None:
        heapq.heappush(self._deadlines, (connection.deadline, next(self._sequence), connection))

    def _on_socket(
        self,
        selector: selectors.BaseSelector,
        connection: _Connection,
        operation: Callable[[socket.socket], T],
    ) -> T | None:
        """``operation`` on the connection's socket; None if it would block, or if the client
        went away (reset, even in the middle of a long /metrics: no fault of ours), which
        closes the connection."""
        try:
            return operation(connection.socket)
        except BlockingIOError:
            return None
        except OSError as error:
            log.debug("http: port %d: %s", connection.listener.port, error)
            self._close(selector, connection)
            return None

    def _receive(self, selector: selectors.BaseSelector, connection: _Connection) -> None:
        data = self._on_socket(selector, connection, lambda sock: sock.recv(_RECV_SIZE))
        if data is None:
            return
        if not data:
            self._close(selector, connection)
            return
        if connection.state is _State.LINGERING:
            return
        connection.inbox += data
        end = _head_end(connection.inbox)
        if end >= 0:
            self._route(selector, connection, bytes(connection.inbox[:end]))
        elif len(connection.inbox) > self.limits.max_request_head:
            self._respond(selector, connection, _HEAD_TOO_LARGE, b"GET")

    def _route(
        self, selector: selectors.BaseSelector, connection: _Connection, head: bytes
    ) -> None:
        request = request_line(head)
        if request is None:
            self._respond(selector, connection, _BAD_REQUEST, b"GET")
            return
        method, path = request
        routes = connection.listener.routes
        handler = routes.get(path) or _under(connection.listener.prefixes, path)
        handler = handler or routes.get(ANY_PATH)
        if handler is None:
            self._respond(selector, connection, _NOT_FOUND, method)
            return
        connection.method, connection.handler = method, handler
        selector.unregister(connection.socket)
        connection.state = _State.QUEUED
        connection.inbox = bytearray()
        connection.listener.waiting.append(connection)
        self._dispatch(connection.listener)

    def _dispatch(self, listener: _Listener) -> None:
        """Hand the listener's next waiting request to a handler thread, if it may have one."""
        if listener.handling is not None or not listener.waiting:
            return
        if listener.pending_output >= self.limits.max_pending_output:
            return
        connection = listener.waiting.popleft()
        listener.handling = connection
        connection.state = _State.HANDLING
        self._unanswered.pop(connection, None)
        connection.deadline = self._clock() + self.limits.response_timeout
        self._push_deadline(connection)
        self._jobs.put(connection)

    def _take_answers(self, selector: selectors.BaseSelector) -> None:
        while True:
            try:
                connection, answer = self._answered.get_nowait()
            except queue.Empty:
                return
            listener = connection.listener
            if listener.handling is connection:
                listener.handling = None
            if not connection.closed:
                self._write(selector, connection, answer)
            self._dispatch(listener)

    def _respond(
        self,
        selector: selectors.BaseSelector,
        connection: _Connection,
        response: Response,
        method: bytes,
    ) -> None:
        """Answer at once, without a handler thread (bad requests and unknown paths)."""
        self._unanswered.pop(connection, None)
        selector.unregister(connection.socket)
        connection.deadline = self._clock() + self.limits.response_timeout
        self._push_deadline(connection)
        self._write(selector, connection, encode_answer(response, method))

    def _write(
        self, selector: selectors.BaseSelector, connection: _Connection, answer: bytes
    ) -> None:
        connection.state = _State.WRITING
        connection.outbox = memoryview(answer)
        connection.listener.pending_output += len(answer)
        selector.register(connection.socket, selectors.EVENT_WRITE, connection)
        self._send(selector, connection)

    def _send(self, selector: selectors.BaseSelector, connection: _Connection) -> None:
        sent = self._on_socket(selector, connection, lambda sock: sock.send(connection.outbox))
        if sent is None:
            return
        connection.listener.pending_output -= sent
        connection.outbox = connection.outbox[sent:]
        if connection.outbox:
            return
        # An empty slice still holds the whole answer, and a closed connection lives on in
        # the deadline heap until its response timeout: each /metrics answer (5.7 MB at
        # 10,000 services) stayed 30 s after it was sent.
        connection.outbox = NOTHING_TO_SEND
        self._dispatch(connection.listener)
        try:
            connection.socket.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(selector, connection)
            return
        connection.state = _State.LINGERING
        connection.deadline = self._clock() + self.limits.linger
        self._push_deadline(connection)
        selector.modify(connection.socket, selectors.EVENT_READ, connection)

    def _expire(self, selector: selectors.BaseSelector) -> None:
        now = self._clock()
        while self._deadlines and self._deadlines[0][0] <= now:
            deadline, _, connection = heapq.heappop(self._deadlines)
            if connection.closed or connection.deadline != deadline:
                continue
            lingered = connection.state is _State.LINGERING
            self._close(selector, connection, None if lingered else "timeout")

    def _close(
        self, selector: selectors.BaseSelector, connection: _Connection, drop: str | None = None
    ) -> None:
        if connection.closed:
            return
        connection.closed = True
        if drop is not None:
            self.dropped[drop] += 1
        self._connections.discard(connection)
        self._unanswered.pop(connection, None)
        listener = connection.listener
        if connection.state is _State.QUEUED:
            listener.waiting.remove(connection)
        if connection.registered:
            selector.unregister(connection.socket)
        if connection.state is _State.WRITING:
            listener.pending_output -= len(connection.outbox)
            self._dispatch(listener)
        connection.outbox = NOTHING_TO_SEND
        connection.socket.close()
