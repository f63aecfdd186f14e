"""Drift: repairs of objects that someone changed behind our back.

An op is a drift repair when the object it writes was already applied, with the same desired
value, by an earlier sync of this reconciler: nothing in the cluster changed, so the kernel
did (``ipvsadm -C``, a flushed kube-ipvs0, a destroyed set). A new reconciler has no record,
so adopting a kernel after a restart counts no drift.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from ipvsproxy.model import (
    AddRealServer,
    AddVirtualServer,
    BindAddress,
    DesiredState,
    IPAddress,
    IPFamily,
    IPSetSpec,
    IptablesRuleset,
    RealServer,
    UpdateRealServer,
    UpdateVirtualServer,
    VirtualServer,
    VirtualServerKey,
)
from ipvsproxy.reconcile.ipsets import canonical_entries
from ipvsproxy.reconcile.operations import (
    AddIPSetEntries,
    CreateIPSet,
    EnsureInterface,
    PlanOp,
    RealServerRef,
    RestoreIptables,
)


@dataclass(frozen=True, slots=True)
class AppliedRecord:
    """The desired objects the last sync left in place (failed ones excluded)."""

    interface: bool = False
    virtual_servers: tuple[tuple[VirtualServerKey, VirtualServer], ...] = ()
    real_servers: tuple[tuple[RealServerRef, RealServer], ...] = ()
    addresses: frozenset[IPAddress] = frozenset()
    ipsets: tuple[tuple[str, IPSetSpec], ...] = ()
    ipset_entries: frozenset[tuple[str, str]] = frozenset()
    iptables: tuple[IptablesRuleset, ...] = ()


def record_applied(desired: DesiredState, failed: Iterable[PlanOp]) -> AppliedRecord:
    failed_ops = list(failed)
    virtual = {key: wanted.server for key, wanted in desired.virtual_servers.items()}
    real = {
        RealServerRef(key, real_key): server
        for key, wanted in desired.virtual_servers.items()
        for real_key, server in wanted.real_servers.items()
    }
    addresses = set(desired.bound_addresses)
    ipsets = {name: content.spec for name, content in desired.ipsets.items()}
    entries = {
        (name, e) for name, content in desired.ipsets.items() for e in canonical_entries(content)
    }
    iptables = {ruleset.family: ruleset for ruleset in desired.iptables}
    interface = True
    for op in failed_ops:
        match op:
            case EnsureInterface():
                interface = False
            case AddVirtualServer(server) | UpdateVirtualServer(server):
                virtual.pop(server.key, None)
            case AddRealServer(key, server) | UpdateRealServer(key, server):
                real.pop(RealServerRef(key, server.key), None)
            case BindAddress(address):
                addresses.discard(address)
            case CreateIPSet(spec):
                ipsets.pop(spec.name, None)
            case AddIPSetEntries(name, failed_entries):
                entries.difference_update((name, e) for e in failed_entries)
            case RestoreIptables(ruleset):
                iptables.pop(ruleset.family, None)
    return AppliedRecord(
        interface=interface,
        virtual_servers=tuple(virtual.items()),
        real_servers=tuple(real.items()),
        addresses=frozenset(addresses),
        ipsets=tuple(ipsets.items()),
        ipset_entries=frozenset(entries),
        iptables=tuple(iptables.values()),
    )


def count_drift(ops: Iterable[PlanOp], record: AppliedRecord) -> Counter[str]:
    """Drift repairs among ``ops`` (those the sync wrote or tried to), counted by kind."""
    virtual = dict(record.virtual_servers)
    real = dict(record.real_servers)
    ipsets = dict(record.ipsets)
    iptables: dict[IPFamily, IptablesRuleset] = {r.family: r for r in record.iptables}
    drift: Counter[str] = Counter()
    for op in ops:
        match op:
            case EnsureInterface() if record.interface:
                drift["interface"] += 1
            case AddVirtualServer(server) | UpdateVirtualServer(server):
                drift["virtual_server"] += virtual.get(server.key) == server
            case AddRealServer(key, server) | UpdateRealServer(key, server):
                drift["real_server"] += real.get(RealServerRef(key, server.key)) == server
            case BindAddress(address):
                drift["address"] += address in record.addresses
            case CreateIPSet(spec):
                drift["ipset"] += ipsets.get(spec.name) == spec
            case AddIPSetEntries(name, entries):
                drift["ipset_entry"] += sum((name, e) in record.ipset_entries for e in entries)
            case RestoreIptables(ruleset):
                drift["iptables"] += iptables.get(ruleset.family) == ruleset
    return +drift
