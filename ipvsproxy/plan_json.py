"""Each plan operation as structured JSON fields, for ``--output json`` (schema in README).

Scripts read these fields, never the display text: ``op`` is the operation's kind; IPVS
operations carry ``virtual_server`` (and ``real_server``) as protocol, address and port,
with the ``service`` port and ``address_kind`` that want them where the plan knows it.
"""

from __future__ import annotations

from typing import Any, assert_never

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
    PlanOp,
    RealServer,
    RealServerKey,
    ReplaceIPSet,
    RestoreIptables,
    SetIPVSTimeouts,
    SetSysctl,
    UnbindAddress,
    UpdateRealServer,
    UpdateVirtualServer,
    VirtualServer,
    VirtualServerKey,
)
from ipvsproxy.reconcile.describe import describe

SCHEMA = "ipvsproxy.io/sync-plan/v1"


def _virtual_key(key: VirtualServerKey, desired: DesiredState) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "virtual_server": {
            "protocol": str(key.protocol),
            "address": str(key.address),
            "port": key.port,
        }
    }
    wanted = desired.virtual_servers.get(key)
    if wanted is not None:
        fields["service"] = str(wanted.owner)
        fields["address_kind"] = str(wanted.kind)
    return fields


def _virtual(server: VirtualServer, desired: DesiredState) -> dict[str, Any]:
    return {
        **_virtual_key(server.key, desired),
        "scheduler": server.scheduler,
        "persistence_timeout": server.timeout,
    }


def _real_key(key: RealServerKey) -> dict[str, Any]:
    return {"real_server": {"address": str(key.address), "port": key.port}}


def _real(virtual: VirtualServerKey, server: RealServer, desired: DesiredState) -> dict[str, Any]:
    return {**_virtual_key(virtual, desired), **_real_key(server.key), "weight": server.weight}


def _fields(op: PlanOp, desired: DesiredState) -> dict[str, Any]:
    match op:
        case SetSysctl(name, value, current):
            return {"sysctl": name, "value": value, "current": current}
        case SetIPVSTimeouts(timeouts):
            return {"tcp": timeouts.tcp, "tcp_fin": timeouts.tcp_fin, "udp": timeouts.udp}
        case EnsureInterface(name):
            return {"interface": name}
        case BindAddress(address) | UnbindAddress(address):
            return {"address": str(address)}
        case CreateIPSet(spec):
            return {"ipset": spec.name, "set_type": spec.set_type, "family": str(spec.family)}
        case AddIPSetEntries(name, entries) | DeleteIPSetEntries(name, entries):
            return {"ipset": name, "entries": list(entries)}
        case ReplaceIPSet(content):
            spec = content.spec
            return {
                "ipset": spec.name,
                "set_type": spec.set_type,
                "family": str(spec.family),
                "entries": sorted(content.entries),
            }
        case RestoreIptables(ruleset):
            return {"family": str(ruleset.family)}
        case AddVirtualServer(server) | UpdateVirtualServer(server):
            return _virtual(server, desired)
        case DeleteVirtualServer(key):
            return _virtual_key(key, desired)
        case AddRealServer(virtual, server) | UpdateRealServer(virtual, server):
            return _real(virtual, server, desired)
        case DeleteRealServer(virtual, key) | FlushConntrack(virtual, key):
            return {**_virtual_key(virtual, desired), **_real_key(key)}
        case _:
            assert_never(op)


def operation_json(op: PlanOp, desired: DesiredState) -> dict[str, Any]:
    """``op`` (the kind), ``text`` (for people) and the kind's own fields."""
    return {"op": type(op).__name__, "text": describe(op), **_fields(op, desired)}
