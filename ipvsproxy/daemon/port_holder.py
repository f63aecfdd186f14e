"""Who holds a TCP port another process wants: for the one line a proxy that cannot listen says.

The listening sockets of this network namespace (the node's, with hostNetwork) are in
/proc/net/tcp and tcp6; the process that holds one has ``socket:[INODE]`` among its file
descriptors. A process in another PID namespace (a pod without hostPID looking at kube-proxy)
is not in this /proc: then only the socket is found, and the line says so.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

_LISTEN = "0A"
# /proc/net/tcp's columns: sl local_address rem_address st tx_queue:rx_queue tr:tm->when
# retrnsmt uid timeout inode.
_LOCAL, _STATE, _INODE = 1, 3, 9


@dataclass(frozen=True, slots=True)
class Holder:
    pid: int
    name: str


def listening_inodes(port: int, proc: Path = Path("/proc")) -> frozenset[int]:
    """The inodes of this namespace's TCP sockets listening on ``port``, any address."""
    found: set[int] = set()
    for table in ("net/tcp", "net/tcp6"):
        try:
            lines = (proc / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) <= _INODE or fields[_STATE] != _LISTEN:
                continue
            if int(fields[_LOCAL].rpartition(":")[2], 16) == port:
                found.add(int(fields[_INODE]))
    return frozenset(found)


def _socket_inodes(pid_dir: Path) -> Iterator[int]:
    try:
        descriptors = list((pid_dir / "fd").iterdir())
    except OSError:
        return
    for descriptor in descriptors:
        try:
            target = os.readlink(descriptor)
        except OSError:
            continue
        if target.startswith("socket:["):
            yield int(target[len("socket:[") : -1])


def holders(inodes: frozenset[int], proc: Path = Path("/proc")) -> list[Holder]:
    """The processes this /proc shows holding any of ``inodes``, by pid."""
    found: list[Holder] = []
    if not inodes:
        return found
    for pid_dir in proc.iterdir():
        if not pid_dir.name.isdigit() or int(pid_dir.name) == os.getpid():
            continue
        if any(inode in inodes for inode in _socket_inodes(pid_dir)):
            try:
                name = (pid_dir / "comm").read_text().strip()
            except OSError:
                name = "?"
            found.append(Holder(int(pid_dir.name), name))
    return sorted(found, key=lambda holder: holder.pid)


def who_holds(port: int, proc: Path = Path("/proc")) -> str:
    """A clause naming what listens on ``port``, or "" when nothing is seen listening."""
    inodes = listening_inodes(port, proc)
    if not inodes:
        return ""
    found = holders(inodes, proc)
    if not found:
        return (
            "held by a process outside this PID namespace (a pod sees the node's processes "
            "only with hostPID; on a node that still runs kube-proxy, it holds 10249 and 10256)"
        )
    return "held by " + ", ".join(f"{holder.name} (pid {holder.pid})" for holder in found)


def cannot_listen(what: str, host: str, port: int, error: OSError) -> str:
    """One line: what could not be served where, why, and what holds the port if in use."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    line = f"cannot serve {what} on {where}: {error.strerror or error}"
    if error.errno == errno.EADDRINUSE:
        held = who_holds(port)
        if held:
            line = f"{line}, {held}"
    return line
