"""Which Service port owns each virtual server, and which real servers it wants.

This is all ``show`` needs of a translation. The daemon has one already and serves it as
JSON on its local metrics port (``/owners``, one Service's at ``/owners/NAMESPACE/NAME``), so
``show`` inside the pod names what it prints without listing the whole cluster from the API in
a second process beside the daemon. Bounded on both sides: the daemon answers at most
``MAX_VIRTUAL_SERVERS`` and says when it left some out; a reader refuses a body past
``MAX_BODY``.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ipvsproxy.model import (
    AddressKind,
    DesiredState,
    ObjectKey,
    RealServerKey,
    ServicePortName,
    TransportProtocol,
    VirtualServerKey,
)

SCHEMA = "ipvsproxy.io/owners/v1"
PATH = "/owners"
# 10,000 services make about 11,000 virtual servers; an answer stays below ~60 MB.
MAX_VIRTUAL_SERVERS = 50_000
MAX_BODY = 64 << 20


@dataclass(frozen=True, slots=True)
class Owner:
    port: ServicePortName
    kind: AddressKind
    real_servers: frozenset[RealServerKey]


Owners = Mapping[VirtualServerKey, Owner]


@dataclass(frozen=True, slots=True)
class OwnersAnswer:
    owners: Owners
    # The daemon left virtual servers out (over MAX_VIRTUAL_SERVERS).
    truncated: bool = False


def owners_of(
    desired: DesiredState, service: ObjectKey | None = None
) -> dict[VirtualServerKey, Owner]:
    return {
        key: Owner(wanted.owner, wanted.kind, frozenset(wanted.real_servers))
        for key, wanted in desired.virtual_servers.items()
        if service is None or wanted.owner.service == service
    }


def service_of(subpath: str) -> ObjectKey | None:
    """``NAMESPACE/NAME`` after ``/owners/``; None when it is not that."""
    namespace, _, name = subpath.partition("/")
    if not namespace or not name or "/" in name:
        return None
    return ObjectKey(namespace, name)


def owners_json(
    desired: DesiredState | None,
    service: ObjectKey | None = None,
    limit: int = MAX_VIRTUAL_SERVERS,
) -> bytes:
    """The daemon's answer; before its first sync, no virtual servers and ``synced`` false."""
    entries: list[dict[str, Any]] = []
    truncated = False
    if desired is not None:
        for key, wanted in desired.virtual_servers.items():
            if service is not None and wanted.owner.service != service:
                continue
            if len(entries) == limit:
                truncated = True
                break
            entries.append(_entry(key, wanted.owner, wanted.kind, wanted.real_servers))
    document = {
        "schema": SCHEMA,
        "synced": desired is not None,
        "truncated": truncated,
        "virtualServers": entries,
    }
    return json.dumps(document, separators=(",", ":")).encode()


def _entry(
    key: VirtualServerKey,
    port: ServicePortName,
    kind: AddressKind,
    real_servers: Mapping[RealServerKey, object],
) -> dict[str, Any]:
    return {
        "protocol": key.protocol.value,
        "address": str(key.address),
        "port": key.port,
        "service": str(port.service),
        "portName": port.port_name,
        "kind": kind.value,
        "realServers": [[str(real.address), real.port] for real in real_servers],
    }


def _port(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 65535:
        raise ValueError(f"{value!r} is not a port")
    return value


def _owner(entry: Any) -> tuple[VirtualServerKey, Owner]:
    if not isinstance(entry, dict):
        raise ValueError("a virtual server is not an object")
    protocol = TransportProtocol(entry["protocol"])
    key = VirtualServerKey(protocol, ipaddress.ip_address(entry["address"]), _port(entry["port"]))
    service = service_of(entry["service"])
    if service is None or not isinstance(entry["portName"], str):
        raise ValueError(f"{entry['service']!r} is not NAMESPACE/NAME")
    reals = frozenset(
        RealServerKey(ipaddress.ip_address(address), _port(port))
        for address, port in entry["realServers"]
    )
    port_name = ServicePortName(service, entry["portName"], protocol)
    return key, Owner(port_name, AddressKind(entry["kind"]), reals)


def parse_owners(body: bytes) -> OwnersAnswer:
    """The daemon's answer; ValueError when it is not one."""
    if len(body) > MAX_BODY:
        raise ValueError(f"{len(body)} bytes, over the bound of {MAX_BODY}")
    try:
        document = json.loads(body)
        if not isinstance(document, dict) or document.get("schema") != SCHEMA:
            raise ValueError(f"not {SCHEMA}")
        if not document["synced"]:
            raise ValueError("the proxy has not synced yet")
        owners = dict(_owner(entry) for entry in document["virtualServers"])
    except (KeyError, TypeError, RecursionError, json.JSONDecodeError) as error:
        raise ValueError(f"not {SCHEMA}: {error}") from None
    return OwnersAnswer(owners, bool(document["truncated"]))
