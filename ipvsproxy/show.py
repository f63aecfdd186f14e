"""The live IPVS table in Kubernetes terms: grouped by service port, as a table or JSON.

Names come from the owners of a translation (``owners``: each virtual server's Service port and
the real servers it wants); without them, or for virtual servers no service owns, rows carry
no names. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ipvsproxy.model import (
    AddressKind,
    IPVSTable,
    ObjectKey,
    RealServerState,
    ServicePortName,
    TrafficStats,
    VirtualServerKey,
    VirtualServerState,
)
from ipvsproxy.owners import Owners


@dataclass(frozen=True, slots=True)
class RealServerRow:
    state: RealServerState
    # Weight 0 and no longer wanted: graceful termination is waiting for its connections.
    draining: bool


@dataclass(frozen=True, slots=True)
class VirtualServerRow:
    state: VirtualServerState
    kind: AddressKind | None
    real_servers: tuple[RealServerRow, ...]


@dataclass(frozen=True, slots=True)
class ServicePortView:
    owner: ServicePortName | None  # None: no service owns these virtual servers
    virtual_servers: tuple[VirtualServerRow, ...]


def _virtual_row(state: VirtualServerState, owners: Owners | None) -> VirtualServerRow:
    wanted = owners.get(state.server.key) if owners else None
    reals = tuple(
        RealServerRow(
            real,
            real.server.weight == 0 and (wanted is None or key not in wanted.real_servers),
        )
        for key, real in sorted(state.real_servers.items(), key=lambda item: item[0].sort_key())
    )
    return VirtualServerRow(state, wanted.kind if wanted else None, reals)


def build_view(
    table: IPVSTable, owners: Owners | None = None, service: ObjectKey | None = None
) -> list[ServicePortView]:
    """Service ports by name, then the unowned virtual servers; only ``service``'s if given."""
    groups: dict[ServicePortName | None, list[VirtualServerRow]] = {}
    for key in sorted(table, key=VirtualServerKey.sort_key):
        wanted = owners.get(key) if owners else None
        owner = wanted.port if wanted else None
        if service is not None and (owner is None or owner.service != service):
            continue
        groups.setdefault(owner, []).append(_virtual_row(table[key], owners))
    named = sorted((owner for owner in groups if owner is not None), key=str)
    order: list[ServicePortName | None] = [*named, *([None] if None in groups else [])]
    return [ServicePortView(owner, tuple(groups[owner])) for owner in order]


def _stats_json(stats: TrafficStats) -> dict[str, int]:
    return {
        "connections": stats.connections,
        "packetsIn": stats.packets_in,
        "packetsOut": stats.packets_out,
        "bytesIn": stats.bytes_in,
        "bytesOut": stats.bytes_out,
    }


def _real_json(row: RealServerRow) -> dict[str, Any]:
    server = row.state.server
    return {
        "address": str(server.key.address),
        "port": server.key.port,
        "weight": server.weight,
        "forward": server.forward.name.lower(),
        "activeConnections": row.state.active_connections,
        "inactiveConnections": row.state.inactive_connections,
        "persistentConnections": row.state.persistent_connections,
        "stats": _stats_json(row.state.stats),
        "draining": row.draining,
    }


def _virtual_json(row: VirtualServerRow) -> dict[str, Any]:
    server = row.state.server
    return {
        "protocol": server.key.protocol.value,
        "address": str(server.key.address),
        "port": server.key.port,
        "scheduler": server.scheduler,
        "persistenceTimeout": server.timeout,
        "kind": row.kind.value if row.kind else None,
        "stats": _stats_json(row.state.stats),
        "realServers": [_real_json(real) for real in row.real_servers],
    }


def view_json(view: Sequence[ServicePortView]) -> str:
    return json.dumps(
        [
            {
                "service": str(port.owner.service) if port.owner else None,
                "portName": port.owner.port_name if port.owner else None,
                "virtualServers": [_virtual_json(row) for row in port.virtual_servers],
            }
            for port in view
        ],
        indent=2,
    )


HEADER = (
    "SERVICE PORT",
    "KIND",
    "VIRTUAL SERVER",
    "SCHEDULER",
    "REAL SERVER",
    "WEIGHT",
    "ACTIVE",
    "INACTIVE",
    "CONNECTIONS",
    "PACKETS IN/OUT",
    "BYTES IN/OUT",
    "STATE",
)


def _traffic(stats: TrafficStats) -> tuple[str, str, str]:
    return (
        str(stats.connections),
        f"{stats.packets_in}/{stats.packets_out}",
        f"{stats.bytes_in}/{stats.bytes_out}",
    )


def _rows(port: ServicePortView) -> list[tuple[str, ...]]:
    name = str(port.owner) if port.owner else "-"
    rows: list[tuple[str, ...]] = []
    for virtual in port.virtual_servers:
        server = virtual.state.server
        scheduler = server.scheduler + (f" persistent {server.timeout}" if server.timeout else "")
        head = (name, virtual.kind.value if virtual.kind else "-", str(server.key), scheduler)
        name = ""
        if not virtual.real_servers:
            rows.append((*head, "-", "", "", "", *_traffic(virtual.state.stats), "no endpoints"))
        for real in virtual.real_servers:
            rows.append(
                (
                    *head,
                    str(real.state.server.key),
                    str(real.state.server.weight),
                    str(real.state.active_connections),
                    str(real.state.inactive_connections),
                    *_traffic(real.state.stats),
                    "draining" if real.draining else "",
                )
            )
            head = ("", "", "", "")
    return rows


def view_text(view: Sequence[ServicePortView]) -> str:
    rows = [HEADER, *(row for port in view for row in _rows(port))]
    widths = [max(len(row[column]) for row in rows) for column in range(len(HEADER))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        for row in rows
    ]
    virtuals = [virtual for port in view for virtual in port.virtual_servers]
    reals = [real for virtual in virtuals for real in virtual.real_servers]
    draining = sum(real.draining for real in reals)
    footer = f"{len(virtuals)} virtual servers, {len(reals)} real servers ({draining} draining)"
    return "\n".join([*(line.rstrip() for line in lines), footer])
