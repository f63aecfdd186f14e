"""Live load across a proxy switch: short requests at a steady rate, long-lived connections
that keep talking, UDP request/response, and a client whose session affinity is watched.

Everything runs in one asyncio loop on a thread of the test process: the pods' servers (TCP
and UDP on one port, answering each line or datagram with the pod's name) and the clients. A
socket keeps the network namespace it was made in, so each is made inside ``inside()`` (no
await in between) and then handed to the loop. Short requests come from a fixed number of
workers, each starting its next request when its last one ended, at most ``rate`` a second in
all: the lab shares a loaded host's CPU, and an open-loop generator there only builds a
backlog that times out. A black hole still shows: each TCP request records whether its
connection needed a retransmission (TCP_INFO), which only a dropped packet causes. Every
request and exchange is recorded with its time; a test splits them by phase.
"""

from __future__ import annotations

import asyncio
import itertools
import resource
import socket
import struct
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, cast

from tests.lab.netns import family_of, inside

SERVE_PORT = 8080
# A request or exchange not answered within this failed (a black hole shows as these); a
# bound for a broken proxy, never a timer. The lab shares a loaded host's CPU.
ANSWER_TIMEOUT = 10.0
# Slower than this, a request probably waited for a retransmission: reported, not failed.
SLOW = 1.0
LONG_LIVED_INTERVAL = 0.5
AFFINITY_INTERVAL = 0.25
# Requests in flight at once (each worker waits for its last answer): enough for the rate at
# the lab's usual latency, few enough that a starved lab slows down instead of timing out.
SHORT_WORKERS = 16
UDP_WORKERS = 2
LINGER_RESET = struct.pack("ii", 1, 0)
OPEN_FILES = 8192
# struct tcp_info: tcpi_total_retrans is the u32 at byte 100 (linux/tcp.h).
TCP_INFO_SIZE = 104
TOTAL_RETRANS = struct.Struct("=I")
TOTAL_RETRANS_OFFSET = 100


@dataclass(frozen=True)
class Target:
    """Where a client in ``namespace`` (None: the node) sends: ``name`` labels its records."""

    name: str
    namespace: str | None
    address: str
    port: int


@dataclass(frozen=True)
class Request:
    target: str
    started: float  # time.time()
    seconds: float
    answer: str = ""
    error: str = ""
    # Segments of its TCP connection sent again: a packet was dropped on the way.
    retransmitted: int = 0


@dataclass
class LongLived:
    target: Target
    backend: str = ""
    # (time.time(), seconds) of every exchange answered by ``backend``.
    exchanges: list[tuple[float, float]] = field(default_factory=list)
    error: str = ""
    failed_at: float = 0.0


@dataclass(frozen=True)
class PhaseReport:
    requests: int
    failed: list[Request]
    retransmitted: list[Request]
    slow: int
    slowest: float
    long_lived_kept: int
    long_lived_lost: list[str]
    affinity_backends: set[str]
    udp_requests: int


def _lost(conversation: LongLived, start: float) -> str:
    """Why a long-lived connection counts as lost, and when, from ``start`` on."""
    if not conversation.error:
        return f"{conversation.target.name}: did not talk after the switch"
    last = max((at for at, _ in conversation.exchanges), default=start)
    return (
        f"{conversation.target.name} ({conversation.backend}): {conversation.error}, "
        f"{conversation.failed_at - start:+.1f} s from the phase's start, "
        f"{len(conversation.exchanges)} exchanges, the last {last - start:+.1f} s"
    )


class _NameServer(asyncio.Protocol):
    def __init__(self, name: bytes) -> None:
        self.name = name
        self.transport: asyncio.Transport | None = None
        self.buffer = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        assert self.transport is not None
        while b"\n" in self.buffer:
            _, self.buffer = self.buffer.split(b"\n", 1)
            self.transport.write(self.name)


class _NameDatagrams(asyncio.DatagramProtocol):
    def __init__(self, name: bytes) -> None:
        self.name = name
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # CPython's datagram transport is no subclass of the DatagramTransport it implements.
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        assert self.transport is not None
        self.transport.sendto(self.name, addr)


def _listening(namespace: str, kind: socket.SocketKind) -> socket.socket:
    with inside(namespace):
        sock = socket.socket(socket.AF_INET6, kind)
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("::", SERVE_PORT))
    if kind == socket.SOCK_STREAM:
        sock.listen(4096)
    sock.setblocking(False)
    return sock


def _client_socket(target: Target, kind: socket.SocketKind) -> socket.socket:
    with inside(target.namespace):
        sock = socket.socket(family_of(target.address), kind)
    sock.setblocking(False)
    return sock


async def _read_line(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> str:
    reply = b""
    while not reply.endswith(b"\n"):
        chunk = await loop.sock_recv(sock, 256)
        if not chunk:
            raise ConnectionError("closed before the pod answered")
        reply += chunk
    return reply.decode().strip()


class Load:
    """Servers in ``pods`` (namespace -> name) and the clients; ``start`` then ``stop``."""

    def __init__(
        self,
        pods: dict[str, str],
        *,
        short: list[Target],
        rate: float,
        long_lived: list[Target],
        udp: list[Target],
        udp_rate: float,
        affinity: Target,
    ) -> None:
        self.pods = pods
        self.short = short
        self.rate = rate
        self.long_lived = [LongLived(target) for target in long_lived]
        self.udp = udp
        self.udp_rate = udp_rate
        self.affinity = affinity
        self.requests: list[Request] = []
        self.udp_requests: list[Request] = []
        self.affinity_requests: list[Request] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="load", daemon=True)

    # -- control, from the test's thread -----------------------------------------------------

    def start(self) -> Load:
        # Two descriptors per request in flight (client and server): the lab's default 1024
        # would run out while a switch slows answers down.
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        wanted = max(soft, OPEN_FILES)
        if soft < wanted:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, max(hard, wanted)))
        self._thread.start()
        if not self._ready.wait(60) or self._error is not None:
            raise RuntimeError(f"the load did not start: {self._error!r}")
        return self

    def stop(self) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and self._thread.is_alive():
            loop.call_soon_threadsafe(stop.set)
        # In-flight requests end within their timeout.
        self._thread.join(ANSWER_TIMEOUT + 30)
        if self._error is not None:
            raise RuntimeError("the load generator failed") from self._error

    # -- the loop ------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as error:  # reported to the test's thread by stop()
            self._error = error
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        servers = await self._serve()
        tasks = [
            *self._workers(SHORT_WORKERS, self.rate, self.short, self._short_request),
            *self._workers(UDP_WORKERS, self.udp_rate, self.udp, self._udp_request),
            asyncio.create_task(self._affinity()),
            *(asyncio.create_task(self._talk(conversation)) for conversation in self.long_lived),
        ]
        self._ready.set()
        await self._stop.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for server in servers:
            server.close()

    async def _serve(self) -> list[asyncio.AbstractServer | asyncio.BaseTransport]:
        loop = asyncio.get_running_loop()
        made: list[asyncio.AbstractServer | asyncio.BaseTransport] = []
        for namespace, name in self.pods.items():
            answer = f"{name}\n".encode()
            made.append(
                await loop.create_server(
                    lambda answer=answer: _NameServer(answer),  # type: ignore[misc]
                    sock=_listening(namespace, socket.SOCK_STREAM),
                )
            )
            transport, _ = await loop.create_datagram_endpoint(
                lambda name=name: _NameDatagrams(name.encode()),  # type: ignore[misc]
                sock=_listening(namespace, socket.SOCK_DGRAM),
            )
            made.append(transport)
        return made

    def _workers(
        self,
        count: int,
        rate: float,
        targets: list[Target],
        one: Callable[[Target], Coroutine[Any, Any, None]],
    ) -> list[asyncio.Task[None]]:
        """``count`` workers taking turns over ``targets``, at most ``rate`` requests a second."""
        if not targets or rate <= 0:
            return []
        turns = itertools.count()
        next_start = [time.monotonic()]

        async def work() -> None:
            while True:
                # The next slot of the rate, taken before waiting, so workers never share one.
                slot = next_start[0] = max(next_start[0] + 1 / rate, time.monotonic())
                await asyncio.sleep(slot - time.monotonic())
                await one(targets[next(turns) % len(targets)])

        return [asyncio.create_task(work()) for _ in range(count)]

    async def _tcp_exchange(self, target: Target) -> tuple[str, int]:
        """The answer, and how many segments the connection had to send again."""
        loop = asyncio.get_running_loop()
        sock = _client_socket(target, socket.SOCK_STREAM)
        try:
            await loop.sock_connect(sock, (target.address, target.port))
            await loop.sock_sendall(sock, b"who\n")
            answer = await _read_line(loop, sock)
            info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_SIZE)
            (retransmitted,) = TOTAL_RETRANS.unpack_from(info, TOTAL_RETRANS_OFFSET)
            # A reset rather than a FIN: no TIME_WAIT left behind for every request.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_RESET)
            return answer, int(retransmitted)
        finally:
            sock.close()

    async def _timed(
        self,
        target: Target,
        records: list[Request],
        exchange: Callable[[Target], Coroutine[Any, Any, tuple[str, int]]],
    ) -> None:
        started, clock = time.time(), time.monotonic()
        try:
            answer, retransmitted = await asyncio.wait_for(exchange(target), ANSWER_TIMEOUT)
        except TimeoutError:
            seconds = time.monotonic() - clock
            text = f"no answer within {ANSWER_TIMEOUT:g} s"
            records.append(Request(target.name, started, seconds, error=text))
        except OSError as error:
            seconds = time.monotonic() - clock
            text = f"{type(error).__name__}: {error}"
            records.append(Request(target.name, started, seconds, error=text))
        else:
            seconds = time.monotonic() - clock
            records.append(Request(target.name, started, seconds, answer, "", retransmitted))

    async def _short_request(self, target: Target) -> None:
        await self._timed(target, self.requests, self._tcp_exchange)

    async def _udp_exchange(self, target: Target) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        sock = _client_socket(target, socket.SOCK_DGRAM)
        try:
            await loop.sock_connect(sock, (target.address, target.port))
            await loop.sock_sendall(sock, b"who\n")
            return (await loop.sock_recv(sock, 256)).decode(), 0
        finally:
            sock.close()

    async def _udp_request(self, target: Target) -> None:
        await self._timed(target, self.udp_requests, self._udp_exchange)

    async def _affinity(self) -> None:
        while True:
            await self._timed(self.affinity, self.affinity_requests, self._tcp_exchange)
            await asyncio.sleep(AFFINITY_INTERVAL)

    async def _talk(self, conversation: LongLived) -> None:
        loop = asyncio.get_running_loop()
        target = conversation.target
        sock = _client_socket(target, socket.SOCK_STREAM)
        try:
            await asyncio.wait_for(
                loop.sock_connect(sock, (target.address, target.port)), ANSWER_TIMEOUT
            )
            while True:
                clock = time.monotonic()
                await loop.sock_sendall(sock, b"who\n")
                answer = await asyncio.wait_for(_read_line(loop, sock), ANSWER_TIMEOUT)
                if conversation.backend and answer != conversation.backend:
                    raise ConnectionError(f"moved from {conversation.backend} to {answer}")
                conversation.backend = answer
                conversation.exchanges.append((time.time(), time.monotonic() - clock))
                await asyncio.sleep(LONG_LIVED_INTERVAL)
        except TimeoutError:
            conversation.error = f"stalled: no answer within {ANSWER_TIMEOUT:g} s"
            conversation.failed_at = time.time()
        except OSError as error:
            conversation.error = f"{type(error).__name__}: {error}"
            conversation.failed_at = time.time()
        finally:
            sock.close()

    # -- results ------------------------------------------------------------------------------

    def phase(self, start: float, end: float, settled: float) -> PhaseReport:
        """What happened between ``start`` and ``end`` (``time.time()``). A long-lived
        connection is kept if it never failed and talked after ``settled`` (the switch done)."""
        within = [
            r
            for r in (*self.requests, *self.udp_requests, *self.affinity_requests)
            if start <= r.started < end
        ]
        answered = [r for r in within if not r.error]
        kept = [
            c
            for c in self.long_lived
            if not c.error and any(settled <= at < end for at, _ in c.exchanges)
        ]
        lost = [_lost(c, start) for c in self.long_lived if c not in kept]
        return PhaseReport(
            requests=len(within),
            failed=[r for r in within if r.error],
            retransmitted=[r for r in answered if r.retransmitted],
            slow=sum(r.seconds > SLOW for r in answered),
            slowest=max((r.seconds for r in answered), default=0.0),
            long_lived_kept=len(kept),
            long_lived_lost=lost,
            affinity_backends={
                r.answer for r in self.affinity_requests if start <= r.started < end and r.answer
            },
            udp_requests=sum(start <= r.started < end for r in self.udp_requests),
        )

    def rate_between(self, start: float, end: float) -> float:
        count = sum(start <= r.started < end for r in self.requests)
        return count / (end - start) if end > start else 0.0

    def longest_exchange(self) -> float:
        return max((s for c in self.long_lived for _, s in c.exchanges), default=0.0)
