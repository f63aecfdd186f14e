"""An in-memory IPVS table that refuses ops with the errnos the kernel uses."""

from __future__ import annotations

import errno
import threading
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import assert_never

from ipvsproxy.kernel.errors import refused
from ipvsproxy.kernel.ipvs import KERNEL_DEFAULT_TIMEOUTS, WRITABLE_FLAGS
from ipvsproxy.model import (
    SCHEDULERS,
    AddRealServer,
    AddVirtualServer,
    BatchResult,
    DeleteRealServer,
    DeleteVirtualServer,
    IPVSOp,
    IPVSTable,
    IPVSTimeouts,
    OpError,
    RealServer,
    RealServerKey,
    RealServerState,
    UpdateRealServer,
    UpdateVirtualServer,
    VirtualServer,
    VirtualServerKey,
    VirtualServerState,
)


@dataclass
class _FakeVirtualServer:
    server: VirtualServer
    real_servers: dict[RealServerKey, RealServer] = field(default_factory=dict)
    # (active, inactive) connections, as tests set them; a deleted real server loses them.
    connections: dict[RealServerKey, tuple[int, int]] = field(default_factory=dict)

    def state(self, real_servers: bool = True) -> VirtualServerState:
        return VirtualServerState(
            self.server,
            {
                key: RealServerState(real, *self.connections.get(key, (0, 0)))
                for key, real in self.real_servers.items()
            }
            if real_servers
            else {},
        )


class FakeIPVS:
    """An in-memory IPVS table that refuses ops with the errnos the kernel uses."""

    def __init__(self, schedulers: Collection[str] = SCHEDULERS) -> None:
        """``schedulers``: those the kernel has or can load a module for (tests may change
        them meanwhile, as a module that becomes loadable)."""
        self._table: dict[VirtualServerKey, _FakeVirtualServer] = {}
        self.schedulers = frozenset(schedulers)
        self._timeouts = KERNEL_DEFAULT_TIMEOUTS
        # The kernel serialises its table: a scrape thread may read while a sync writes.
        self._lock = threading.Lock()

    def timeouts(self) -> IPVSTimeouts:
        return self._timeouts

    def set_timeouts(self, timeouts: IPVSTimeouts) -> None:
        self._timeouts = timeouts.set_over(self._timeouts)

    def dump(self, *, real_servers: bool = True, traffic: bool = True) -> IPVSTable:
        # No traffic passes through the fake: its statistics are always zero.
        with self._lock:
            return {key: entry.state(real_servers) for key, entry in self._table.items()}

    def listed(self) -> Iterator[VirtualServerState]:
        # Read at the first step, as a netlink dump is.
        yield from self.dump(real_servers=False).values()

    def virtual_server(self, key: VirtualServerKey) -> VirtualServerState | None:
        with self._lock:
            entry = self._table.get(key)
            return None if entry is None else entry.state()

    def with_real_servers(
        self, listed: VirtualServerState, *, traffic: bool = True
    ) -> VirtualServerState | None:
        # No traffic passes through the fake: its statistics are always zero.
        with self._lock:
            entry = self._table.get(listed.server.key)
            if entry is None:
                return None
            return VirtualServerState(listed.server, entry.state().real_servers, listed.stats)

    def set_connections(
        self, virtual: VirtualServerKey, real: RealServerKey, active: int, inactive: int = 0
    ) -> None:
        """Stand for clients: the ActiveConn/InActConn the kernel would count for ``real``."""
        with self._lock:
            entry = self._table[virtual]
            if real not in entry.real_servers:
                raise KeyError(real)
            entry.connections[real] = (active, inactive)

    def apply(self, ops: Sequence[IPVSOp]) -> BatchResult:
        with self._lock:
            return [self._apply_one(op) for op in ops]

    def _apply_one(self, op: IPVSOp) -> OpError | None:
        match op:
            case AddVirtualServer(server) | UpdateVirtualServer(server):
                exists = server.key in self._table
                if isinstance(op, AddVirtualServer) and exists:
                    return refused(errno.EEXIST)
                if isinstance(op, UpdateVirtualServer) and not exists:
                    return refused(errno.ESRCH)
                if server.scheduler not in self.schedulers:
                    return refused(errno.ENOENT)
                stored = VirtualServer(
                    server.key, server.scheduler, server.flags & WRITABLE_FLAGS, server.timeout
                )
                if exists:
                    self._table[server.key].server = stored
                else:
                    self._table[server.key] = _FakeVirtualServer(stored)
            case DeleteVirtualServer(key):
                if self._table.pop(key, None) is None:
                    return refused(errno.ESRCH)
            case AddRealServer(virtual, server) | UpdateRealServer(virtual, server):
                entry = self._table.get(virtual)
                if entry is None:
                    return refused(errno.ESRCH)
                if server.key.address.version != virtual.address.version:
                    return refused(errno.EINVAL)
                exists = server.key in entry.real_servers
                if isinstance(op, AddRealServer) and exists:
                    return refused(errno.EEXIST)
                if isinstance(op, UpdateRealServer) and not exists:
                    return refused(errno.ENOENT)
                entry.real_servers[server.key] = server
            case DeleteRealServer(virtual, key):
                entry = self._table.get(virtual)
                if entry is None:
                    return refused(errno.ESRCH)
                entry.connections.pop(key, None)
                if entry.real_servers.pop(key, None) is None:
                    return refused(errno.ENOENT)
            case _:
                assert_never(op)
        return None
