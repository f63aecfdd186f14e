"""Traffic that tests measure: request tallies, background load, held connections, UDP, HTTP.

Every helper records a failure instead of raising, so a test states its pass criterion on the
tally (``failures == []``, each backend's share) and the message shows what went wrong. Every
wait is bounded: a proxy that black-holes traffic makes a test fail, never hang.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tests.lab.netns import Client, ask, family_of, inside

T = TypeVar("T")
POLL_INTERVAL = 0.2
# How long a proxy may take to apply a change: a bound for a broken one, never a timer. Generous,
# as the lab shares a loaded machine's CPU, where a single sync can take many seconds.
APPLY_TIMEOUT = 90.0


def wait_until(condition: Callable[[], T], timeout: float, what: str | Callable[[], str]) -> T:
    """Poll ``condition`` until it returns something truthy, failing with ``what`` at timeout
    (a callable ``what`` is asked then, so it can tell the last thing it saw)."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s: {what() if callable(what) else what}")
        time.sleep(POLL_INTERVAL)


@dataclass
class Tally:
    """Who answered how many requests, and each failed request's error."""

    answers: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.answers.values()) + len(self.failures)

    def record(self, request: Callable[[], str]) -> None:
        try:
            self.answers[request()] += 1
        except OSError as error:
            self.failures.append(f"{type(error).__name__}: {error}")


def tcp_requests(client: Client, address: str, port: int, count: int) -> Tally:
    """``count`` requests, each on a new TCP connection."""
    tally = Tally()
    for _ in range(count):
        tally.record(lambda: _one_tcp_request(client, address, port))
    return tally


def udp_requests(client: Client, address: str, port: int, count: int) -> Tally:
    """``count`` datagrams, each from a new socket (a new source port)."""
    tally = Tally()
    for _ in range(count):
        tally.record(lambda: UdpConversation(client, address, port).ask_once())
    return tally


def _one_tcp_request(client: Client, address: str, port: int) -> str:
    with client.connect(address, port) as sock:
        return ask(sock)


def wait_answered_by(
    client: Client,
    address: str,
    port: int,
    backends: set[str],
    timeout: float = APPLY_TIMEOUT,
    *,
    protocol: str = "TCP",
) -> None:
    """Wait until a few requests get answers from exactly ``backends`` and no failure."""
    send = udp_requests if protocol == "UDP" else tcp_requests
    probes = 2 * len(backends) + 1
    seen = [Tally()]

    def answered() -> bool:
        seen[0] = send(client, address, port, probes)
        return not seen[0].failures and set(seen[0].answers) == backends

    wait_until(
        answered,
        timeout,
        lambda: f"{protocol} {address}:{port} answered by {sorted(backends)}; last: {seen[0]}",
    )


class LoadGenerator:
    """A background client that keeps opening new connections until stopped.

    Use as a context manager; ``tally`` holds every request made so far.
    """

    def __init__(self, client: Client, address: str, port: int, pause: float = 0.02) -> None:
        self.client = client
        self.address = address
        self.port = port
        self.pause = pause
        self.tally = Tally()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load-generator", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.tally.record(lambda: _one_tcp_request(self.client, self.address, self.port))
            self._stop.wait(self.pause)

    def __enter__(self) -> LoadGenerator:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> Tally:
        self._stop.set()
        # One request is at most a connect and a read, each bounded by the client's timeout.
        self._thread.join(2 * self.client.timeout + 1)
        return self.tally

    def wait_for_requests(self, count: int, timeout: float = 30.0) -> None:
        start = self.tally.total
        wait_until(
            lambda: self.tally.total >= start + count,
            timeout,
            f"{count} more requests from the load generator to {self.address}:{self.port}",
        )


class InFlight:
    """A long-lived connection: one request when opened, the next one whenever the test says.

    The backend that answered first must answer again: a proxy that cut or moved the
    connection in between makes ``complete`` fail.
    """

    def __init__(self, client: Client, address: str, port: int) -> None:
        self._sock = client.connect(address, port)
        self.backend = ask(self._sock)

    def complete(self) -> str:
        """The second request's answer (or the error), then close."""
        try:
            return ask(self._sock)
        except OSError as error:
            return f"{type(error).__name__}: {error}"
        finally:
            self._sock.close()


class UdpConversation:
    """Datagrams from one socket, so from one source port, as a DNS client's retries are."""

    def __init__(self, client: Client, address: str, port: int) -> None:
        with inside(client.namespace):
            self._sock = socket.socket(family_of(address), socket.SOCK_DGRAM)
        self._sock.settimeout(client.timeout)
        self._sock.connect((address, port))

    def ask(self) -> str:
        self._sock.send(b"who\n")
        return self._sock.recv(256).decode()

    def ask_once(self) -> str:
        with self._sock:
            return self.ask()

    def tally(self, count: int) -> Tally:
        tally = Tally()
        for _ in range(count):
            tally.record(self.ask)
        return tally

    def close(self) -> None:
        self._sock.close()


@dataclass(frozen=True)
class HttpReply:
    status: int
    body: str

    def json(self) -> Any:
        return json.loads(self.body)


def http_get(client: Client, address: str, port: int, path: str) -> HttpReply:
    """One HTTP/1.0 GET from the client's namespace; the server closes when done."""
    with client.connect(address, port) as sock:
        sock.sendall(f"GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.decode().partition("\r\n\r\n")
    return HttpReply(int(head.split()[1]), body)
