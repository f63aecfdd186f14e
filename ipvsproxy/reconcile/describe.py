"""Each plan op in one line of plain words, for failures and logs."""

from __future__ import annotations

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
    EnsureInterface,
    FlushConntrack,
    IPVSTimeouts,
    PlanOp,
    ReplaceIPSet,
    RestoreIptables,
    SetIPVSTimeouts,
    SetSysctl,
    UnbindAddress,
    UpdateRealServer,
    UpdateVirtualServer,
)


def _entries(entries: tuple[str, ...]) -> str:
    return entries[0] if len(entries) == 1 else f"{len(entries)} entries"


def _timeouts(timeouts: IPVSTimeouts) -> str:
    named = (("tcp", timeouts.tcp), ("tcpfin", timeouts.tcp_fin), ("udp", timeouts.udp))
    return ", ".join(f"{name} {seconds}s" for name, seconds in named if seconds)


def describe(op: PlanOp) -> str:
    match op:
        case SetSysctl(name, value, current):
            return f"set sysctl {name} {'(absent)' if current is None else current} -> {value}"
        case SetIPVSTimeouts(timeouts):
            return f"set IPVS timeouts {_timeouts(timeouts)}"
        case EnsureInterface(name):
            return f"create interface {name}"
        case BindAddress(address):
            return f"bind address {address}"
        case UnbindAddress(address):
            return f"unbind address {address}"
        case CreateIPSet(spec):
            return f"create ipset {spec.name} ({spec.set_type}, {spec.family})"
        case AddIPSetEntries(name, entries):
            return f"add {_entries(entries)} to ipset {name}"
        case DeleteIPSetEntries(name, entries):
            return f"delete {_entries(entries)} from ipset {name}"
        case ReplaceIPSet(content):
            spec = content.spec
            return (
                f"replace ipset {spec.name} with a {spec.set_type} {spec.family} set of "
                f"{len(content.entries)} entries, swapped in"
            )
        case RestoreIptables(ruleset):
            return f"restore {ruleset.family} iptables chains"
        case AddVirtualServer(server):
            return f"add virtual server {server.key} {server.scheduler}"
        case UpdateVirtualServer(server):
            return f"update virtual server {server.key} {server.scheduler}"
        case DeleteVirtualServer(key):
            return f"delete virtual server {key}"
        case AddRealServer(virtual, server):
            return f"add real server {server.key} to {virtual}"
        case UpdateRealServer(virtual, server):
            return f"set weight {server.weight} on real server {server.key} of {virtual}"
        case DeleteRealServer(virtual, key):
            return f"delete real server {key} from {virtual}"
        case FlushConntrack(virtual, real):
            return f"flush conntrack entries of {virtual} to {real}"
        case _:
            assert_never(op)
