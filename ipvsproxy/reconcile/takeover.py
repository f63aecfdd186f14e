"""Whether the first sync on a node another proxy programmed would interrupt its traffic.

``ipvsproxy takeover --check`` plans that first sync (a fresh reconciler, as ``run`` starts)
against the live kernel and judges the plan against the IPVS table it was made from: a
virtual server that carries traffic must be neither deleted nor re-created, or its clients
lose their connections (and, with session affinity, their backend). Everything else a sync
writes keeps traffic flowing: a changed scheduler or persistence is updated in place, a
real server taken out drains at weight 0 (TCP), an ipset is swapped, iptables chains are
restored in one commit.
"""

from __future__ import annotations

from dataclasses import dataclass

from ipvsproxy.model import (
    AddVirtualServer,
    DeleteRealServer,
    DeleteVirtualServer,
    IPVSTable,
    VirtualServerKey,
    VirtualServerState,
    virtual_of,
)
from ipvsproxy.reconcile.syncplan import SyncPlan


def connections(state: VirtualServerState) -> int:
    """Connections IPVS tracks on a virtual server: active, inactive (UDP flows too) and the
    persistence templates that hold session affinity."""
    return sum(
        real.active_connections + real.inactive_connections + real.persistent_connections
        for real in state.real_servers.values()
    )


@dataclass(frozen=True, slots=True)
class Interruption:
    """A virtual server carrying traffic that the plan deletes or re-creates."""

    key: VirtualServerKey
    connections: int
    recreated: bool

    def __str__(self) -> str:
        verb = "re-create" if self.recreated else "delete"
        return f"would {verb} virtual server {self.key}, which has {self.connections} connections"


@dataclass(frozen=True, slots=True)
class TakeoverCheck:
    # Virtual servers already in the kernel that the sync keeps, written to or not.
    adopted: int
    # Of those, the ones kept exactly as they are (no op on them or their real servers).
    untouched: int
    ipvs_writes: int
    interruptions: tuple[Interruption, ...]
    # Real servers with connections that go at once (UDP, SCTP): their flows are forgotten.
    real_servers_cut: int

    @property
    def safe(self) -> bool:
        return not self.interruptions


def check_takeover(plan: SyncPlan, actual: IPVSTable) -> TakeoverCheck:
    ops = plan.ipvs.ops
    deleted = {op.key for op in ops if isinstance(op, DeleteVirtualServer)}
    added = {op.server.key for op in ops if isinstance(op, AddVirtualServer)}
    touched = {virtual_of(op) for op in ops}
    interruptions = tuple(
        Interruption(key, busy, recreated=key in added)
        for key in sorted(deleted, key=VirtualServerKey.sort_key)
        if (busy := connections(actual[key]))
    )
    cut = sum(
        1
        for op in ops
        if isinstance(op, DeleteRealServer)
        and (state := actual[op.virtual].real_servers.get(op.key)) is not None
        and state.active_connections + state.inactive_connections > 0
    )
    kept = actual.keys() - deleted
    return TakeoverCheck(
        adopted=len(kept),
        untouched=len(kept - touched),
        ipvs_writes=len(ops),
        interruptions=interruptions,
        real_servers_cut=cut,
    )
