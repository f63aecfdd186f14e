"""Drift: repairs of objects that someone changed behind our back.

An op is a drift repair when the object it writes was applied, with the same desired value,
by the previous sync of this reconciler: nothing in the cluster changed, so the kernel
did (``ipvsadm -C``, a flushed kube-ipvs0, a destroyed set). A new reconciler has no record,
so adopting a kernel after a restart counts no drift.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import assert_never

from ipvsproxy.model import (
    AddIPSetEntries,
    AddRealServer,
    AddVirtualServer,
    BindAddress,
    CreateIPSet,
    DeleteIPSetEntries,
    DeleteRealServer,
    DeleteVirtualServer,
    DesiredState,
    EnsureInterface,
    FlushConntrack,
    IPAddress,
    IPFamily,
    IPSetContent,
    IptablesRuleset,
    PlanOp,
    RealServerRef,
    ReplaceIPSet,
    RestoreIptables,
    SetIPVSTimeouts,
    SetSysctl,
    UnbindAddress,
    UpdateRealServer,
    UpdateVirtualServer,
    VirtualServerKey,
)


@dataclass(frozen=True, slots=True)
class AppliedRecord:
    """The desired state the last sync applied, less the objects whose ops failed there."""

    desired: DesiredState | None = None
    interface_failed: bool = False
    virtual_servers: frozenset[VirtualServerKey] = frozenset()
    real_servers: frozenset[RealServerRef] = frozenset()
    addresses: frozenset[IPAddress] = frozenset()
    ipsets: frozenset[str] = frozenset()
    ipset_entries: frozenset[tuple[str, str]] = frozenset()
    iptables: frozenset[IPFamily] = frozenset()
    sysctls: frozenset[str] = frozenset()
    timeouts_failed: bool = False


def record_applied(desired: DesiredState, failed: Iterable[PlanOp]) -> AppliedRecord:
    """O(failures): the desired state is kept as it is, the failed objects beside it."""
    interface_failed = False
    virtual: set[VirtualServerKey] = set()
    real: set[RealServerRef] = set()
    addresses: set[IPAddress] = set()
    ipsets: set[str] = set()
    entries: set[tuple[str, str]] = set()
    iptables: set[IPFamily] = set()
    sysctls: set[str] = set()
    timeouts_failed = False
    for op in failed:
        match op:
            case EnsureInterface():
                interface_failed = True
            case AddVirtualServer(server) | UpdateVirtualServer(server):
                virtual.add(server.key)
            case AddRealServer(key, server) | UpdateRealServer(key, server):
                real.add(RealServerRef(key, server.key))
            case BindAddress(address):
                addresses.add(address)
            case CreateIPSet(spec) | ReplaceIPSet(IPSetContent(spec)):
                ipsets.add(spec.name)
            case AddIPSetEntries(name, failed_entries):
                entries.update((name, e) for e in failed_entries)
            case RestoreIptables(ruleset):
                iptables.add(ruleset.family)
            case SetSysctl(name):
                sysctls.add(name)
            case SetIPVSTimeouts():
                timeouts_failed = True
            case (
                UnbindAddress()
                | DeleteIPSetEntries()
                | DeleteVirtualServer()
                | DeleteRealServer()
                | FlushConntrack()
            ):
                pass  # a deletion writes no object the record keeps
            case _:
                assert_never(op)
    return AppliedRecord(
        desired,
        interface_failed,
        frozenset(virtual),
        frozenset(real),
        frozenset(addresses),
        frozenset(ipsets),
        frozenset(entries),
        frozenset(iptables),
        frozenset(sysctls),
        timeouts_failed,
    )


def _ruleset(desired: DesiredState, family: IPFamily) -> IptablesRuleset | None:
    return next((r for r in desired.iptables if r.family is family), None)


# Every kind ``count_drift`` names (the metric's labels, made before the first repair).
DRIFT_KINDS = (
    "interface",
    "virtual_server",
    "real_server",
    "address",
    "ipset",
    "ipset_entry",
    "iptables",
    "sysctl",
    "ipvs_timeouts",
)


def count_drift(ops: Iterable[PlanOp], record: AppliedRecord) -> Counter[str]:
    """Drift repairs among ``ops`` (those the sync wrote or tried to), counted by kind."""
    before = record.desired
    drift: Counter[str] = Counter()
    if before is None:
        return drift
    for op in ops:
        match op:
            case EnsureInterface():
                drift["interface"] += not record.interface_failed
            case AddVirtualServer(server) | UpdateVirtualServer(server):
                was = before.virtual_servers.get(server.key)
                drift["virtual_server"] += (
                    was is not None
                    and was.server == server
                    and server.key not in record.virtual_servers
                )
            case AddRealServer(key, server) | UpdateRealServer(key, server):
                was = before.virtual_servers.get(key)
                drift["real_server"] += (
                    was is not None
                    and was.real_servers.get(server.key) == server
                    and RealServerRef(key, server.key) not in record.real_servers
                )
            case BindAddress(address):
                drift["address"] += (
                    address in before.bound_addresses and address not in record.addresses
                )
            case CreateIPSet(spec) | ReplaceIPSet(IPSetContent(spec)):
                content = before.ipsets.get(spec.name)
                drift["ipset"] += (
                    content is not None and content.spec == spec and spec.name not in record.ipsets
                )
            case AddIPSetEntries(name, entries):
                content = before.ipsets.get(name)
                had = content.entries if content is not None else frozenset()
                drift["ipset_entry"] += sum(
                    e in had and (name, e) not in record.ipset_entries for e in entries
                )
            case RestoreIptables(ruleset):
                drift["iptables"] += (
                    _ruleset(before, ruleset.family) == ruleset
                    and ruleset.family not in record.iptables
                )
            # The wanted parameters never change within a process: any repeat is a repair.
            case SetSysctl(name):
                drift["sysctl"] += name not in record.sysctls
            case SetIPVSTimeouts():
                drift["ipvs_timeouts"] += not record.timeouts_failed
            case (
                UnbindAddress()
                | DeleteIPSetEntries()
                | DeleteVirtualServer()
                | DeleteRealServer()
                | FlushConntrack()
            ):
                pass  # a deletion repairs nothing: drift is an object written again
            case _:
                assert_never(op)
    return +drift
