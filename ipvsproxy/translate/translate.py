"""Snapshot + settings -> DesiredState, with kube-proxy's IPVS-mode semantics."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from types import MappingProxyType

from ipvsproxy.model import (
    SCHEDULERS,
    AddressKind,
    ClusterSnapshot,
    DesiredState,
    DesiredVirtualServer,
    Endpoint,
    EndpointSlice,
    IPAddress,
    IPFamily,
    ObjectKey,
    RealServer,
    RealServerKey,
    Rejection,
    Service,
    ServiceFlags,
    ServicePort,
    ServicePortName,
    ServiceType,
    TrafficPolicy,
    VirtualServer,
    VirtualServerKey,
)
from ipvsproxy.translate.ipsets import build_ipsets
from ipvsproxy.translate.iptables import build_iptables
from ipvsproxy.translate.settings import Settings

PROXY_NAME_LABEL = "service.kubernetes.io/service-proxy-name"
SCHEDULER_ANNOTATION = "ipvsproxy.io/scheduler"
_HANDLED_ADDRESS_TYPES = {"IPv4": IPFamily.IPV4, "IPv6": IPFamily.IPV6}


class _Rejected(ValueError):
    pass


def _ip(raw: str, what: str) -> IPAddress:
    try:
        return ipaddress.ip_address(raw)
    except ValueError:
        raise _Rejected(f"{what} {raw!r} is not an IP address") from None


def _is_ours(service: Service, settings: Settings) -> bool:
    return service.labels.get(PROXY_NAME_LABEL, "") == settings.service_proxy_name


def _scheduler(service: Service, settings: Settings) -> str:
    name = service.annotations.get(SCHEDULER_ANNOTATION, settings.scheduler)
    if name not in SCHEDULERS:
        raise _Rejected(f"annotation {SCHEDULER_ANNOTATION}: unknown scheduler {name!r}")
    return name


def _candidates(
    port: ServicePort, slices: Iterable[EndpointSlice], family: IPFamily
) -> dict[RealServerKey, Endpoint]:
    """Endpoints of one family for one port, matched by port name; duplicates counted once."""
    found: dict[RealServerKey, Endpoint] = {}
    for endpoint_slice in slices:
        if _HANDLED_ADDRESS_TYPES.get(endpoint_slice.address_type) is not family:
            continue
        target = next(
            (
                p.port
                for p in endpoint_slice.ports
                if p.name == port.name and p.protocol is port.protocol and p.port
            ),
            None,
        )
        if target is None:
            continue
        for endpoint in endpoint_slice.endpoints:
            try:
                address = ipaddress.ip_address(endpoint.addresses[0])
            except ValueError:
                continue
            if IPFamily.of(address) is family:
                found.setdefault(RealServerKey(address, target), endpoint)
    return found


def _zone_hints_apply(endpoints: Iterable[Endpoint], zone: str | None) -> bool:
    """kube-proxy uses hints only if every ready endpoint has some and one names our zone."""
    if zone is None:
        return False
    ready = [ep for ep in endpoints if ep.conditions.ready]
    if any(not ep.hints_for_zones for ep in ready):
        return False
    return any(zone in (ep.hints_for_zones or ()) for ep in ready)


def _usable(
    candidates: dict[RealServerKey, Endpoint],
    node_name: str | None,
    local_only: bool,
    zone: str | None,
) -> dict[RealServerKey, RealServer]:
    """Ready endpoints in scope; failing those, serving+terminating ones; never the rest."""
    scoped = {
        key: ep
        for key, ep in candidates.items()
        if not local_only or (node_name is not None and ep.node_name == node_name)
    }
    if not local_only and _zone_hints_apply(scoped.values(), zone):
        scoped = {key: ep for key, ep in scoped.items() if zone in (ep.hints_for_zones or ())}
    chosen = [key for key, ep in scoped.items() if ep.conditions.ready]
    if not chosen:
        chosen = [
            key for key, ep in scoped.items() if ep.conditions.serving and ep.conditions.terminating
        ]
    return {key: RealServer(key) for key in sorted(chosen, key=RealServerKey.sort_key)}


def _node_addresses(snapshot: ClusterSnapshot, settings: Settings) -> list[IPAddress]:
    raw: list[IPAddress] = []
    if snapshot.node is not None:
        for text in snapshot.node.addresses:
            try:
                raw.append(ipaddress.ip_address(text))
            except ValueError:
                continue
    if not raw:
        raw = list(settings.node_ips)
    if settings.nodeport_addresses:
        raw = [a for a in raw if any(a in net for net in settings.nodeport_addresses)]
    return raw


def _service_servers(
    service: Service,
    slices: list[EndpointSlice],
    snapshot: ClusterSnapshot,
    settings: Settings,
    node_addresses: list[IPAddress],
    *,
    hairpin: dict[VirtualServerKey, frozenset[str]],
    local_external: set[VirtualServerKey],
) -> tuple[dict[VirtualServerKey, DesiredVirtualServer], set[IPAddress]]:
    """This service's virtual servers; fills ``hairpin`` and ``local_external`` for the ipsets."""
    scheduler = _scheduler(service, settings)
    flags = ServiceFlags.PERSISTENT if service.session_affinity_timeout else ServiceFlags.NONE
    timeout = service.session_affinity_timeout or 0
    cluster_ips = [_ip(raw, "clusterIP") for raw in service.cluster_ips]
    external = [(_ip(raw, "externalIP"), AddressKind.EXTERNAL_IP) for raw in service.external_ips]
    if service.type is ServiceType.LOAD_BALANCER:
        external += [
            (ingress.ip, AddressKind.LOAD_BALANCER)
            for ingress in service.load_balancer_ingress
            if ingress.ip_mode != "Proxy"
        ]
    node_name = snapshot.node.name if snapshot.node is not None else None
    zone = snapshot.node.zone if snapshot.node is not None else None
    families = {IPFamily.of(ip) for ip in cluster_ips}
    servers: dict[VirtualServerKey, DesiredVirtualServer] = {}
    bound: set[IPAddress] = set()
    for port in service.ports:
        owner = ServicePortName(service.key, port.name, port.protocol)
        targets: list[tuple[IPAddress, int, AddressKind, bool]] = []
        internal_local = service.internal_traffic_policy is TrafficPolicy.LOCAL
        external_local = service.external_traffic_policy is TrafficPolicy.LOCAL
        targets += [(ip, port.port, AddressKind.CLUSTER_IP, internal_local) for ip in cluster_ips]
        targets += [(ip, port.port, kind, external_local) for ip, kind in external]
        if port.node_port and service.type in (ServiceType.NODE_PORT, ServiceType.LOAD_BALANCER):
            targets += [
                (ip, port.node_port, AddressKind.NODE_PORT, external_local)
                for ip in node_addresses
                if IPFamily.of(ip) in families
            ]
        candidates = {family: _candidates(port, slices, family) for family in families}
        for address, number, kind, local_only in targets:
            family = IPFamily.of(address)
            found = candidates.get(family, {})
            reals = _usable(found, node_name, local_only, zone)
            key = VirtualServerKey(port.protocol, address, number)
            if kind is AddressKind.CLUSTER_IP:
                hairpin[key] = frozenset(
                    str(real) for real in reals if found[real].node_name == node_name
                )
            elif local_only:
                local_external.add(key)
            servers[key] = DesiredVirtualServer(
                server=VirtualServer(key, scheduler, flags, timeout),
                real_servers=MappingProxyType(reals),
                owner=owner,
                kind=kind,
            )
            if kind is not AddressKind.NODE_PORT:
                bound.add(address)
    return servers, bound


def translate(snapshot: ClusterSnapshot, settings: Settings) -> DesiredState:
    slices_by_service: dict[ObjectKey, list[EndpointSlice]] = {}
    rejections: list[Rejection] = []
    for slice_key in sorted(snapshot.endpoint_slices, key=str):
        endpoint_slice = snapshot.endpoint_slices[slice_key]
        if endpoint_slice.address_type not in _HANDLED_ADDRESS_TYPES:
            rejections.append(
                Rejection(
                    f"EndpointSlice {slice_key}",
                    f"addressType {endpoint_slice.address_type!r} is not handled",
                )
            )
            continue
        slices_by_service.setdefault(endpoint_slice.service, []).append(endpoint_slice)
    node_addresses = _node_addresses(snapshot, settings)
    servers: dict[VirtualServerKey, DesiredVirtualServer] = {}
    bound: set[IPAddress] = set()
    health_checks: dict[ObjectKey, int] = {}
    hairpin: dict[VirtualServerKey, frozenset[str]] = {}
    local_external: set[VirtualServerKey] = set()
    for key in sorted(snapshot.services, key=str):
        service = snapshot.services[key]
        headless = not service.cluster_ips or service.cluster_ips[0] == "None"
        if service.type is ServiceType.EXTERNAL_NAME or headless:
            continue
        if not _is_ours(service, settings):
            continue
        service_hairpin: dict[VirtualServerKey, frozenset[str]] = {}
        service_local: set[VirtualServerKey] = set()
        try:
            found, found_bound = _service_servers(
                service,
                slices_by_service.get(key, []),
                snapshot,
                settings,
                node_addresses,
                hairpin=service_hairpin,
                local_external=service_local,
            )
        except _Rejected as error:
            rejections.append(Rejection(f"Service {key}", str(error)))
            continue
        if any(vs_key in servers for vs_key in found):
            rejections.append(
                Rejection(f"Service {key}", "a virtual server is already another service's")
            )
            continue
        servers.update(found)
        hairpin.update(service_hairpin)
        local_external |= service_local
        bound |= found_bound
        if (
            service.external_traffic_policy is TrafficPolicy.LOCAL
            and service.health_check_node_port
        ):
            health_checks[key] = service.health_check_node_port
    return DesiredState(
        virtual_servers=MappingProxyType(servers),
        bound_addresses=frozenset(bound),
        # All of them, NodePorts or not: the reconciler owns (and so cleans) what is on them.
        node_addresses=frozenset(node_addresses),
        ipsets=MappingProxyType(
            build_ipsets(
                servers, frozenset(local_external), hairpin, frozenset(health_checks.values())
            )
        ),
        iptables=build_iptables(settings),
        exclude_cidrs=settings.exclude_cidrs,
        health_check_node_ports=MappingProxyType(health_checks),
        rejections=tuple(rejections),
    )
