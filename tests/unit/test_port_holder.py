"""A port in use is named with what holds it: a process this /proc shows, or one it cannot."""

from __future__ import annotations

import errno
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ipvsproxy.daemon.daemon import Daemon, DaemonOptions, ServeError
from ipvsproxy.daemon.port_holder import cannot_listen, holders, listening_inodes, who_holds
from ipvsproxy.kernel.testing import FakeKernel
from ipvsproxy.translate import Settings

# /proc/net/tcp as Linux writes it: 0.0.0.0:10256 listening (state 0A), 127.0.0.1:10249 in
# TIME_WAIT (06, not held), and a connection from port 10256 (01, a client's, not a listener).
TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout
   0: 00000000:2810 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0
   1: 0100007F:2809 0100007F:D431 06 00000000:00000000 03:00000A3C 00000000     0        0 0 3 0
   2: 0100007F:2810 0100007F:A000 01 00000000:00000000 00:00000000 00000000     0        0 777 1 0
"""
TCP6 = """  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:2809 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5151 1 0
"""  # noqa: E501


def _proc(tmp_path: Path, processes: dict[int, tuple[str, list[str]]]) -> Path:
    proc = tmp_path / "proc"
    (proc / "net").mkdir(parents=True)
    (proc / "net" / "tcp").write_text(TCP)
    (proc / "net" / "tcp6").write_text(TCP6)
    for pid, (name, targets) in processes.items():
        (proc / str(pid) / "fd").mkdir(parents=True)
        (proc / str(pid) / "comm").write_text(f"{name}\n")
        for number, target in enumerate(targets):
            os.symlink(target, proc / str(pid) / "fd" / str(number))
    (proc / "self").mkdir()
    return proc


def test_listeners_are_found_by_port_on_both_families(tmp_path: Path) -> None:
    proc = _proc(tmp_path, {})
    assert listening_inodes(10256, proc) == {4242}
    assert listening_inodes(10249, proc) == {5151}
    assert listening_inodes(8080, proc) == set()


def test_the_holding_process_is_named(tmp_path: Path) -> None:
    proc = _proc(
        tmp_path,
        {
            812: ("kube-proxy", ["/dev/null", "socket:[4242]", "pipe:[9]"]),
            900: ("sshd", ["socket:[777]"]),
        },
    )
    assert [(h.pid, h.name) for h in holders(frozenset({4242}), proc)] == [(812, "kube-proxy")]
    assert who_holds(10256, proc) == "held by kube-proxy (pid 812)"


def test_a_holder_in_another_pid_namespace_is_said_to_be_unseen(tmp_path: Path) -> None:
    said = who_holds(10249, _proc(tmp_path, {900: ("sshd", ["socket:[777]"])}))
    assert said.startswith("held by a process outside this PID namespace")
    assert "kube-proxy" in said


def test_nothing_listening_says_nothing(tmp_path: Path) -> None:
    assert who_holds(8080, _proc(tmp_path, {})) == ""


@pytest.fixture
def held_port() -> Iterator[tuple[int, int]]:
    """(port, pid): a child process listening on loopback, as kube-proxy holds 10256."""
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD_A_PORT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        yield int(child.stdout.readline()), child.pid
    finally:
        child.kill()
        child.wait()


def test_a_real_process_holding_a_port_is_named_by_its_pid(held_port: tuple[int, int]) -> None:
    port, pid = held_port
    assert f"(pid {pid})" in who_holds(port)


def test_a_daemon_that_cannot_listen_names_the_address_and_the_holder(
    held_port: tuple[int, int],
) -> None:
    port, pid = held_port
    options = DaemonOptions(healthz=("127.0.0.1", 0), metrics=("127.0.0.1", port))
    daemon = Daemon(FakeKernel().kernel(), Settings(), options)
    with pytest.raises(ServeError) as raised:
        daemon.serve()
    assert re.fullmatch(
        rf"cannot serve /metrics \(--metrics-bind-address\) on 127\.0\.0\.1:{port}: "
        rf"Address already in use, held by \S+ \(pid {pid}\)",
        str(raised.value),
    )
    # What it did bind is let go again.
    assert daemon.ports == []


HOLD_A_PORT = """
import socket, sys
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen()
print(listener.getsockname()[1], flush=True)
sys.stdin.read()
"""


def test_the_line_names_the_address_why_and_the_holder(tmp_path: Path) -> None:
    in_use = OSError(errno.EADDRINUSE, os.strerror(errno.EADDRINUSE))
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        line = cannot_listen(
            "/healthz and /livez (--healthz-bind-address)", "0.0.0.0", port, in_use
        )
    assert line.startswith(
        f"cannot serve /healthz and /livez (--healthz-bind-address) on 0.0.0.0:{port}: "
        "Address already in use, held by"
    )
    denied = OSError(errno.EACCES, os.strerror(errno.EACCES))
    assert cannot_listen("/metrics", "::1", 80, denied) == (
        "cannot serve /metrics on [::1]:80: Permission denied"
    )
