"""The daemon's HTTP hub over real sockets on loopback: every method answered as kube-proxy's
handlers do, bounded connections and threads whatever clients do, timeouts, quiet resets, and
a pause instead of a spin when the process runs out of descriptors."""

from __future__ import annotations

import json
import logging
import socket
import struct
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator

import pytest

from ipvsproxy.daemon.http import (
    ANY_PATH,
    TEXT,
    HttpHub,
    HttpLimits,
    Response,
    encode_answer,
    request_line,
)
from ipvsproxy.supervise import Supervisor

PATIENCE = 20.0


def eventually(predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + PATIENCE
    while not predicate():
        assert time.monotonic() < deadline, "gave up waiting"
        time.sleep(0.01)


def _ok() -> Response:
    return Response(200, "application/json", b'{"ok": true}')


@pytest.fixture
def make_hub() -> Iterator[Callable[..., HttpHub]]:
    started: list[tuple[HttpHub, Supervisor]] = []

    def make(**limits: float) -> HttpHub:
        workers = Supervisor()
        hub = HttpHub(workers, HttpLimits(**limits))  # type: ignore[arg-type]
        hub.start()
        started.append((hub, workers))
        return hub

    yield make
    for hub, workers in started:
        hub.stop()
        workers.stop(PATIENCE)


def exchange(port: int, request: bytes, timeout: float = PATIENCE) -> bytes:
    """Send ``request`` on a new connection; everything the server sent until it closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return received


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def body_of(answer: bytes) -> bytes:
    return answer.split(b"\r\n\r\n", 1)[1]


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "FOO"])
def test_every_method_gets_the_handlers_answer_as_from_kube_proxy(
    make_hub: Callable[..., HttpHub], method: str
) -> None:
    listener = make_hub().serve("127.0.0.1", 0, {"/healthz": _ok})
    answer = exchange(listener.port, f"{method} /healthz HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert status_of(answer) == 200
    assert body_of(answer) == b'{"ok": true}'
    assert b"X-Content-Type-Options: nosniff\r\n" in answer


def test_head_gets_the_head_alone_with_the_bodys_length(
    make_hub: Callable[..., HttpHub],
) -> None:
    listener = make_hub().serve("127.0.0.1", 0, {"/healthz": _ok})
    answer = exchange(listener.port, b"HEAD /healthz?verbose HTTP/1.0\r\n\r\n")
    assert status_of(answer) == 200
    assert body_of(answer) == b""
    assert b"Content-Length: 12\r\n" in answer


def test_unknown_paths_bad_requests_and_huge_heads_are_answered_in_one_line(
    make_hub: Callable[..., HttpHub],
) -> None:
    listener = make_hub(max_request_head=1024).serve("127.0.0.1", 0, {"/healthz": _ok})
    assert status_of(exchange(listener.port, b"GET /other HTTP/1.1\r\n\r\n")) == 404
    assert status_of(exchange(listener.port, b"nonsense\r\n\r\n")) == 400
    assert status_of(exchange(listener.port, b"GET /healthz\r\n\r\n")) == 400
    huge = b"GET /healthz HTTP/1.1\r\n" + b"X-Pad: " + b"a" * 4096
    assert status_of(exchange(listener.port, huge)) == 431


def test_a_request_body_is_read_and_dropped_not_reset(make_hub: Callable[..., HttpHub]) -> None:
    listener = make_hub().serve("127.0.0.1", 0, {"/healthz": _ok})
    body = b"x" * 200_000
    request = b"POST /healthz HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    assert status_of(exchange(listener.port, request)) == 200


def test_request_lines() -> None:
    assert request_line(b"GET /healthz?x=1 HTTP/1.1\r\nHost: a\r\n\r\n") == (b"GET", "/healthz")
    assert request_line(b"GET http://node:10256/livez HTTP/1.1\r\n\r\n") == (b"GET", "/livez")
    assert request_line(b"GET /healthz HTTP/2\r\n\r\n") is None
    assert request_line(b"G(T /healthz HTTP/1.1\r\n\r\n") is None
    assert request_line(b"GET  /healthz HTTP/1.1\r\n\r\n") is None


def test_an_answer_names_its_length_and_closes() -> None:
    answer = encode_answer(Response(503, "text/plain", b"no"), b"GET")
    assert answer.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
    assert b"Content-Length: 2\r\n" in answer
    assert b"Connection: close\r\n" in answer
    assert answer.endswith(b"\r\n\r\nno")


def test_a_quarter_of_the_descriptors_go_to_connections_within_bounds() -> None:
    assert HttpLimits.for_open_files(1024).max_connections == 256
    assert HttpLimits.for_open_files(1 << 20).max_connections == 1024
    assert HttpLimits.for_open_files(20).max_connections == 16


def test_idle_connections_beyond_the_limit_make_room_and_a_prompt_client_is_answered(
    make_hub: Callable[..., HttpHub],
) -> None:
    hub = make_hub(max_connections=8)
    listener = hub.serve("127.0.0.1", 0, {"/healthz": _ok})
    threads_before = threading.active_count()
    idle = [socket.create_connection(("127.0.0.1", listener.port)) for _ in range(50)]
    try:
        eventually(lambda: hub.dropped["evicted"] >= 42)
        assert hub.connections <= 8
        assert status_of(exchange(listener.port, b"GET /healthz HTTP/1.1\r\n\r\n")) == 200
        assert threading.active_count() == threads_before
        # The oldest were let go: the first connection reads the end of its stream.
        idle[0].settimeout(PATIENCE)
        assert idle[0].recv(1) == b""
    finally:
        for sock in idle:
            sock.close()


def test_a_client_that_never_finishes_its_request_is_let_go(
    make_hub: Callable[..., HttpHub],
) -> None:
    hub = make_hub(request_timeout=0.2)
    listener = hub.serve("127.0.0.1", 0, {"/healthz": _ok})
    with socket.create_connection(("127.0.0.1", listener.port), timeout=PATIENCE) as slow:
        slow.sendall(b"GET /healthz HTTP/1.1\r\n")
        assert slow.recv(1) == b""
    assert hub.dropped["timeout"] == 1


def test_a_slow_handler_on_one_listener_does_not_delay_another(
    make_hub: Callable[..., HttpHub],
) -> None:
    hub = make_hub()
    release = threading.Event()

    def slow() -> Response:
        release.wait(PATIENCE)
        return _ok()

    metrics = hub.serve("127.0.0.1", 0, {"/metrics": slow})
    health = hub.serve("127.0.0.1", 0, {"/healthz": _ok})
    waiting = [socket.create_connection(("127.0.0.1", metrics.port)) for _ in range(3)]
    try:
        for sock in waiting:
            sock.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
        assert status_of(exchange(health.port, b"GET /healthz HTTP/1.1\r\n\r\n")) == 200
    finally:
        release.set()
        for sock in waiting:
            sock.close()


def test_a_client_that_resets_in_the_middle_of_a_long_answer_is_not_an_error(
    make_hub: Callable[..., HttpHub], caplog: pytest.LogCaptureFixture
) -> None:
    big = Response(200, "text/plain", b"m" * 8_000_000)
    listener = make_hub().serve("127.0.0.1", 0, {"/metrics": lambda: big})
    with caplog.at_level(logging.DEBUG, logger="ipvsproxy"):
        for _ in range(5):
            sock = socket.create_connection(("127.0.0.1", listener.port), timeout=PATIENCE)
            sock.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
            sock.recv(1024)
            # Close with a reset (SO_LINGER 0), as a client killed mid-read does.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
        assert status_of(exchange(listener.port, b"GET /metrics HTTP/1.1\r\n\r\n")) == 200
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert all(r.exc_info is None for r in caplog.records)


def test_an_answer_is_let_go_once_sent(make_hub: Callable[..., HttpHub]) -> None:
    """/metrics at 10,000 services is 5.7 MB: a scrape every 15 s must not keep the last
    ones' answers (each stayed for its 30 s response timeout)."""
    body = b"m" * 4_000_000
    listener = make_hub().serve("127.0.0.1", 0, {"/metrics": lambda: Response(200, TEXT, body)})
    tracemalloc.start()
    try:
        for _ in range(6):
            assert body_of(exchange(listener.port, b"GET /metrics HTTP/1.1\r\n\r\n")) == body
        eventually(lambda: tracemalloc.get_traced_memory()[0] < len(body))
    finally:
        tracemalloc.stop()


def test_a_failing_handler_is_a_500_and_the_server_carries_on(
    make_hub: Callable[..., HttpHub],
) -> None:
    def broken() -> Response:
        raise RuntimeError("a bug")

    listener = make_hub().serve("127.0.0.1", 0, {"/broken": broken, ANY_PATH: _ok})
    assert status_of(exchange(listener.port, b"GET /broken HTTP/1.1\r\n\r\n")) == 500
    assert status_of(exchange(listener.port, b"GET /anything HTTP/1.1\r\n\r\n")) == 200


def test_a_closed_listener_frees_its_port_at_once(make_hub: Callable[..., HttpHub]) -> None:
    hub = make_hub()
    first = hub.serve("127.0.0.1", 0, {"/": _ok})
    port = first.port
    first.close()
    again = hub.serve("127.0.0.1", port, {"/": _ok})
    assert status_of(exchange(again.port, b"GET / HTTP/1.1\r\n\r\n")) == 200


# Runs in a child process whose descriptors the test itself limits: every descriptor is taken,
# then clients wait in the listen queue, then descriptors are freed again.
OUT_OF_DESCRIPTORS = r"""
import json, os, resource, socket, sys, time
from ipvsproxy.daemon.http import HttpHub, HttpLimits, Response
from ipvsproxy.supervise import Supervisor

resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))
hub = HttpHub(Supervisor(), HttpLimits(max_connections=1000))
listener = hub.serve("127.0.0.1", 0, {"/healthz": lambda: Response(200, "text/plain", b"ok")})
hub.start()
clients = [socket.socket() for _ in range(5)]
filler = []
while True:
    try:
        filler.append(os.open("/dev/null", os.O_RDONLY))
    except OSError:
        break
for client in clients:
    client.connect(("127.0.0.1", listener.port))
    client.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
time.sleep(float(sys.argv[1]))
pauses = hub.accept_pauses
for fd in filler:
    os.close(fd)
answers = []
for client in clients:
    client.settimeout(20)
    received = b""
    while chunk := client.recv(4096):
        received += chunk
    answers.append(received.split(b" ", 2)[1].decode())
print(json.dumps({"pauses": pauses, "answers": answers}))
"""


def test_out_of_descriptors_accepting_pauses_instead_of_spinning_and_then_resumes() -> None:
    seconds_out_of_descriptors = 2.0
    done = subprocess.run(
        [sys.executable, "-c", OUT_OF_DESCRIPTORS, str(seconds_out_of_descriptors)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    # Pauses of 5 ms doubling to 1 s: about ten in two seconds (a spin makes tens of thousands).
    assert 1 <= result["pauses"] <= 30
    assert result["answers"] == ["200"] * 5
    assert done.stderr.count("cannot accept connections: Too many open files") == 1


RAISE_LIMIT = r"""
import resource
from ipvsproxy.daemon.main import raise_open_files_limit
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 1024))
print(raise_open_files_limit(), *resource.getrlimit(resource.RLIMIT_NOFILE))
"""


def test_the_daemon_raises_its_soft_open_files_limit_to_the_hard_one() -> None:
    done = subprocess.run(
        [sys.executable, "-c", RAISE_LIMIT], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split() == ["1024", "1024", "1024"]
