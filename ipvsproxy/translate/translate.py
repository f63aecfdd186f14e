"""One Service's share of the desired state, with kube-proxy's IPVS-mode semantics.

``incremental`` merges the shares into the DesiredState (``translate`` is its rebuild).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from functools import partial
from types import MappingProxyType

from ipvsproxy.address_rules import unusable_reason
from ipvsproxy.frozen_init import quick_init
from ipvsproxy.model import (
    SCHEDULERS,
    AddressKind,
    DesiredVirtualServer,
    Endpoint,
    EndpointSlice,
    IPAddress,
    IPFamily,
    IPNetwork,
    ObjectKey,
    RealServer,
    RealServerKey,
    Rejection,
    Service,
    ServiceFlags,
    ServicePortName,
    ServiceType,
    SkipReason,
    TrafficPolicy,
    TransportProtocol,
    VirtualServer,
    VirtualServerKey,
)
from ipvsproxy.names import PROXY_NAME_LABEL, SCHEDULER_ANNOTATION
from ipvsproxy.persistent import frozen_shared
from ipvsproxy.translate.endpoints import (
    HANDLED_ADDRESS_TYPES,
    AddressCache,
    Candidates,
    choose_endpoints,
    find_candidates,
    has_usable_endpoints,
)
from ipvsproxy.translate.ipsets import Firewall
from ipvsproxy.translate.node import NodeFacts, address_owner, moved_addresses
from ipvsproxy.translate.node_ports import NodePortKey, PortUse, refused_node_port
from ipvsproxy.translate.settings import Settings


class _Rejected(ValueError):
    pass


def _is_ours(service: Service, settings: Settings) -> bool:
    # As kube-proxy's label selector: any value, even empty, names another proxy.
    if not settings.service_proxy_name:
        return PROXY_NAME_LABEL not in service.labels
    return service.labels.get(PROXY_NAME_LABEL) == settings.service_proxy_name


def _scheduler(service: Service, settings: Settings) -> str:
    name = service.annotations.get(SCHEDULER_ANNOTATION, settings.scheduler)
    if name not in SCHEDULERS:
        raise _Rejected(f"annotation {SCHEDULER_ANNOTATION}: unknown scheduler {name!r}")
    return name


NO_FIREWALLS: Mapping[VirtualServerKey, Firewall] = MappingProxyType({})
NO_NODE_PORTS: Mapping[NodePortKey, PortUse] = MappingProxyType({})


@quick_init
@dataclass(frozen=True, slots=True)
class ServiceState:
    """One service's share of the desired state; each virtual server merged if it wins.

    Kept for every service between syncs, and mostly empty but for ``servers``: the empty
    containers are the shared empty ones (a fresh empty set is 216 bytes; 10,000 services
    kept about 8 MB of them)."""

    servers: Mapping[VirtualServerKey, DesiredVirtualServer]
    # Endpoints on this node, with the port's protocol, for the hairpin set.
    hairpin: AbstractSet[tuple[TransportProtocol, RealServerKey]]
    local_external: AbstractSet[VirtualServerKey]
    firewalls: Mapping[VirtualServerKey, Firewall]
    # Which Local traffic policies ("internal", "external") found endpoints, none on this node.
    no_local_endpoints: AbstractSet[str]
    # The node ports it asks for, each with what for: it gets those it wins against other
    # services (its NodePort virtual servers, its health check), settled across services.
    node_ports: Mapping[NodePortKey, PortUse]
    health_check: int | None
    # The addresses checked against every Node's (the user-written ones): they decide whether
    # this share still holds once Nodes' addresses change.
    node_checked: AbstractSet[IPAddress]
    rejections: tuple[Rejection, ...]


@dataclass(slots=True)
class _Building:
    """A ServiceState being made."""

    servers: dict[VirtualServerKey, DesiredVirtualServer] = field(default_factory=dict)
    hairpin: set[tuple[TransportProtocol, RealServerKey]] = field(default_factory=set)
    local_external: set[VirtualServerKey] = field(default_factory=set)
    firewalls: dict[VirtualServerKey, Firewall] = field(default_factory=dict)
    no_local_endpoints: set[str] = field(default_factory=set)
    node_ports: dict[NodePortKey, PortUse] = field(default_factory=dict)
    health_check: int | None = None
    node_checked: set[IPAddress] = field(default_factory=set)
    rejections: list[Rejection] = field(default_factory=list)

    def done(self) -> ServiceState:
        return ServiceState(
            servers=self.servers,
            hairpin=frozen_shared(self.hairpin),
            local_external=frozen_shared(self.local_external),
            firewalls=MappingProxyType(self.firewalls) if self.firewalls else NO_FIREWALLS,
            no_local_endpoints=frozen_shared(self.no_local_endpoints),
            node_ports=MappingProxyType(self.node_ports) if self.node_ports else NO_NODE_PORTS,
            health_check=self.health_check,
            node_checked=frozen_shared(self.node_checked),
            rejections=tuple(self.rejections),
        )


def _usable(address: IPAddress, what: str, service: Service, state: _Building) -> bool:
    reason = unusable_reason(address)
    if reason is not None:
        state.rejections.append(
            Rejection(
                f"Service {service.key}",
                f"{what} {address} is {reason}; ignored",
                SkipReason.UNUSABLE_ADDRESS,
            )
        )
    return reason is None


def _addresses(
    raws: Iterable[str], what: str, service: Service, state: _Building, cache: AddressCache
) -> list[IPAddress]:
    """The addresses among ``raws`` that parse and may be bound; the others each rejected."""
    found: list[IPAddress] = []
    for raw in raws:
        parsed = cache.get(raw)
        if parsed is None:
            state.rejections.append(
                Rejection(f"Service {service.key}", f"{what} {raw!r} is not an IP address; ignored")
            )
        elif _usable(parsed, what, service, state):
            found.append(parsed)
    return found


_WRITTEN = {
    AddressKind.EXTERNAL_IP: "externalIP",
    AddressKind.LOAD_BALANCER: "load-balancer ingress IP",
}


_NO_OTHER_NODES: Mapping[IPAddress, str] = MappingProxyType({})


def _not_a_node_address(
    address: IPAddress,
    what: str,
    nodes: tuple[NodeFacts, Mapping[IPAddress, str]],
    service: Service,
    state: _Building,
) -> bool:
    """Never this node's address, nor another Node's among ``nodes`` (CVE-2020-8554): a
    virtual server there would hand this node's own ports (sshd, the kubelet) to the service's
    pods, and an address bound on kube-ipvs0 would cut every node off from the node that has
    it."""
    if nodes[1]:
        state.node_checked.add(address)
    owner = address_owner(address, *nodes)
    if owner is None:
        return True
    state.rejections.append(
        Rejection(
            f"Service {service.key}",
            f"{what} {address} is {owner} address; ignored",
            SkipReason.NODE_ADDRESS,
        )
    )
    return False


def _node_port_allowed(
    port: int, use: PortUse, settings: Settings, service: Service, state: _Building
) -> bool:
    reason = refused_node_port(port, use, settings)
    if reason is not None:
        state.rejections.append(
            Rejection(
                f"Service {service.key}", f"{reason}; ignored", SkipReason.NODE_PORT_NOT_ALLOWED
            )
        )
    return reason is None


def _health_check(service: Service, settings: Settings, state: _Building) -> int | None:
    """The health-check node port it asks for, if it may: inside the range, not one of the
    node's own ports, nor one of its own TCP nodePorts (which keeps the number)."""
    port = health_check_node_port(service)
    if port is None or not _node_port_allowed(port, PortUse.HEALTH_CHECK, settings, service, state):
        return None
    key = NodePortKey(TransportProtocol.TCP, port)
    if key in state.node_ports:
        state.rejections.append(
            Rejection(
                f"Service {service.key}",
                f"healthCheckNodePort {port} is also its TCP nodePort; ignored",
                SkipReason.ADDRESS_CONFLICT,
            )
        )
        return None
    state.node_ports[key] = PortUse.HEALTH_CHECK
    return port


def _allowed_external(
    address: IPAddress, service: Service, settings: Settings, state: _Building
) -> bool:
    ranges = settings.external_ip_ranges
    if not ranges or any(address in network for network in ranges):
        return True
    state.rejections.append(
        Rejection(
            f"Service {service.key}",
            f"externalIP {address} is outside --service-external-ip-range; ignored",
            SkipReason.EXTERNAL_IP_NOT_ALLOWED,
        )
    )
    return False


def _source_ranges(service: Service, state: _Building) -> tuple[tuple[IPNetwork, ...], bool]:
    """The parsed loadBalancerSourceRanges, and whether any could not be parsed."""
    ranges: list[IPNetwork] = []
    broken = False
    for raw in service.load_balancer_source_ranges:
        try:
            ranges.append(ipaddress.ip_network(raw.strip(), strict=False))
        except ValueError:
            broken = True
            state.rejections.append(
                Rejection(
                    f"Service {service.key}",
                    f"loadBalancerSourceRanges {raw!r} is not a CIDR; left out of the firewall",
                )
            )
    return tuple(dict.fromkeys(ranges)), broken


def _firewall(
    address: IPAddress,
    ranges: tuple[IPNetwork, ...],
    broken: bool,
    node: NodeFacts,
) -> Firewall | None:
    """kube-proxy firewalls an LB IP when the service has source ranges of its family.

    A range that did not parse still closes the firewall (fail closed): without it the
    remaining ranges, or none, are all that may reach the load balancer.
    """
    family = IPFamily.of(address)
    own = tuple(net for net in ranges if IPFamily.of(net) is family)
    # A zero-prefix range allows everyone: the same as no ranges, as kube-proxy reads it.
    if any(net.prefixlen == 0 for net in own) or (not own and not broken):
        return None
    node_ip = node.primary.get(family)
    allow_from_node = node_ip is not None and any(node_ip in net for net in own)
    return Firewall(own, allow_from_node)


def _service_state(
    service: Service,
    slices: list[EndpointSlice],
    settings: Settings,
    nodes: tuple[NodeFacts, Mapping[IPAddress, str]],
    cache: AddressCache,
) -> ServiceState:
    """This service's virtual servers, addresses and ipset inputs."""
    state = _Building()
    node = nodes[0]
    scheduler = _scheduler(service, settings)
    flags = ServiceFlags.PERSISTENT if service.session_affinity_timeout else ServiceFlags.NONE
    if scheduler == "mh":
        # kube-proxy's FlagSourceHash: mh hashes on source port as well as address.
        flags |= ServiceFlags.SCHED2
    timeout = service.session_affinity_timeout or 0
    cluster_ips = [
        ip
        for ip in _addresses(service.cluster_ips, "clusterIP", service, state, cache)
        # Checked against this node's addresses alone: the API server allocates cluster IPs,
        # and a Node's status is its kubelet's to write; another node claiming one must not
        # take a Service away from every node.
        if _not_a_node_address(ip, "clusterIP", (node, _NO_OTHER_NODES), service, state)
    ]
    # kube-proxy runs one proxier per family and a service exists in a family's proxier
    # only through a cluster IP of that family: other addresses of other families are left.
    families = {IPFamily.of(ip) for ip in cluster_ips}
    external = [
        (ip, AddressKind.EXTERNAL_IP)
        for ip in _addresses(service.external_ips, "externalIP", service, state, cache)
        if _allowed_external(ip, service, settings, state)
    ]
    # kube-proxy takes the ingress IPs from the status whatever the type says.
    external += [
        (ingress.ip, AddressKind.LOAD_BALANCER)
        for ingress in service.load_balancer_ingress
        if ingress.ip_mode != "Proxy"
        and _usable(ingress.ip, "load-balancer ingress IP", service, state)
    ]
    external = [
        (ip, kind)
        for ip, kind in external
        if IPFamily.of(ip) in families
        and _not_a_node_address(ip, _WRITTEN[kind], nodes, service, state)
    ]
    ranges, broken_ranges = _source_ranges(service, state)
    internal_local = service.internal_traffic_policy is TrafficPolicy.LOCAL
    external_local = service.external_traffic_policy is TrafficPolicy.LOCAL
    for port in service.ports:
        owner = ServicePortName(service.key, port.name, port.protocol)
        targets: list[tuple[IPAddress, int, AddressKind, bool]] = [
            (ip, port.port, AddressKind.CLUSTER_IP, internal_local) for ip in cluster_ips
        ]
        targets += [(ip, port.port, kind, external_local) for ip, kind in external]
        if (
            port.node_port
            and service.type in (ServiceType.NODE_PORT, ServiceType.LOAD_BALANCER)
            and _node_port_allowed(port.node_port, PortUse.NODE_PORT, settings, service, state)
        ):
            state.node_ports[NodePortKey(port.protocol, port.node_port)] = PortUse.NODE_PORT
            targets += [
                (ip, port.node_port, AddressKind.NODE_PORT, external_local)
                for ip in node.node_port_addresses
                if IPFamily.of(ip) in families
            ]
        candidates = {family: find_candidates(port, slices, family) for family in families}
        # The endpoint choice depends only on family and policy scope, not on the address:
        # compute it once and share the frozen mapping between this port's virtual servers.
        if node.name is not None:
            # As kube-proxy: every endpoint of this node, whatever its condition, so a pod
            # reaching itself through any of the port's virtual servers is masqueraded.
            state.hairpin.update(
                (port.protocol, real)
                for found in candidates.values()
                for real, ep in found.values()
                if ep.node_name == node.name
            )
        chosen: dict[tuple[IPFamily, bool, bool], Mapping[RealServerKey, RealServer]] = {}
        for address, number, kind, local_only in targets:
            family = IPFamily.of(address)
            internal = kind is AddressKind.CLUSTER_IP
            scope = (family, local_only, local_only and internal)
            if scope not in chosen:
                usable = _usable_endpoints(candidates[family], node, local_only, internal, state)
                chosen[scope] = MappingProxyType({real: RealServer(real) for real in usable})
            reals = chosen[scope]
            key = VirtualServerKey(port.protocol, address, number)
            if key in state.servers:
                state.rejections.append(
                    Rejection(
                        f"Service {service.key}",
                        f"{key} ({kind}) is already its {state.servers[key].kind}; ignored",
                        SkipReason.ADDRESS_CONFLICT,
                    )
                )
                continue
            if local_only and kind is not AddressKind.CLUSTER_IP:
                state.local_external.add(key)
            if kind is AddressKind.LOAD_BALANCER:
                firewall = _firewall(address, ranges, broken_ranges, node)
                if firewall is not None:
                    state.firewalls[key] = firewall
            state.servers[key] = DesiredVirtualServer(
                server=VirtualServer(key, scheduler, flags, timeout),
                real_servers=reals,
                owner=owner,
                kind=kind,
            )
    state.health_check = _health_check(service, settings, state)
    return state.done()


def _usable_endpoints(
    candidates: Candidates,
    node: NodeFacts,
    local_only: bool,
    internal: bool,
    state: _Building,
) -> dict[RealServerKey, Endpoint]:
    """The endpoints a virtual server gets; Local with none on this node falls back as kube-proxy.

    kube-proxy's IPVS proxier (kubernetes#97081) gives an external virtual server the
    cluster-wide endpoints when the policy is Local and none is on this node, so this node's
    pods still reach the service through its NodePort, external or load-balancer IPs; outside
    clients are kept away by the health-check node port. A Local cluster IP keeps none.
    """
    usable = choose_endpoints(candidates, node.name, local_only, node.zone)
    if not local_only or usable or not has_usable_endpoints(candidates):
        return usable
    state.no_local_endpoints.add("internal" if internal else "external")
    return usable if internal else choose_endpoints(candidates, node.name, False, node.zone)


class ServiceCache:
    """Each service's share of the desired state, kept from one translation to the next.

    A service whose Service and EndpointSlice objects are the very same objects as last time,
    on the same node with the same settings, is not translated again: a sync after one changed
    slice translates one service. Objects are frozen and parsed once, so identity is equality.
    When other Nodes' addresses change, only the shares that checked one of those go.
    """

    def __init__(self) -> None:
        self._context: tuple[NodeFacts, Settings] | None = None
        self._nodes_by_address: Mapping[IPAddress, str] = MappingProxyType({})
        self._entries: dict[
            # The share, or why the service was rejected.
            ObjectKey, tuple[Service, tuple[EndpointSlice, ...], ServiceState | str]
        ] = {}

    def begin(
        self,
        node: NodeFacts,
        settings: Settings,
        services: Mapping[ObjectKey, Service],
        nodes_by_address: Mapping[IPAddress, str],
    ) -> None:
        if self._context != (node, settings):
            self._context = (node, settings)
            self._entries.clear()
        elif len(self._entries) > len(services):
            self._entries = {k: v for k, v in self._entries.items() if k in services}
        moved = moved_addresses(self._nodes_by_address, nodes_by_address)
        self._nodes_by_address = nodes_by_address
        if moved:
            self._entries = {
                key: entry
                for key, entry in self._entries.items()
                if isinstance(entry[2], str) or not entry[2].node_checked & moved
            }

    def forget(self, key: ObjectKey) -> None:
        """The service is gone: its share is not kept."""
        self._entries.pop(key, None)

    def service_state(
        self, service: Service, slices: list[EndpointSlice], translate: Callable[[], ServiceState]
    ) -> ServiceState:
        """The cached share if nothing it came from changed, else ``translate()``'s, kept."""
        entry = self._entries.get(service.key)
        if (
            entry is not None
            and entry[0] is service
            and len(entry[1]) == len(slices)
            and all(old is new for old, new in zip(entry[1], slices, strict=True))
        ):
            result = entry[2]
        else:
            try:
                result = translate()
            except _Rejected as error:
                result = str(error)
            self._entries[service.key] = (service, tuple(slices), result)
        if isinstance(result, str):
            raise _Rejected(result)
        return result


def on_node(wanted: DesiredVirtualServer) -> bool:
    """Whether the virtual server's address is the node's own rather than bound on kube-ipvs0:
    a NodePort's. Every other address is bound (one that is a node's is refused before)."""
    return wanted.kind is AddressKind.NODE_PORT


def holds_node_port(
    key: VirtualServerKey,
    kind: AddressKind | PortUse,
    service: ObjectKey,
    holders: Mapping[NodePortKey, ObjectKey],
) -> bool:
    """Whether the service may claim the virtual server: a NodePort's only if it holds the
    node port (another service's health check, or an older NodePort, may)."""
    return (
        kind is not AddressKind.NODE_PORT
        or holders.get(NodePortKey(key.protocol, key.port)) == service
    )


def unhandled_slice(key: ObjectKey, endpoint_slice: EndpointSlice) -> Rejection | None:
    """Why the slice is left out, if it is: an address type kube-proxy does not proxy."""
    if endpoint_slice.address_type in HANDLED_ADDRESS_TYPES:
        return None
    return Rejection(
        f"EndpointSlice {key}", f"addressType {endpoint_slice.address_type!r} is not handled"
    )


def proxied(service: Service, settings: Settings) -> bool:
    """A service this proxy programs: ours, not an ExternalName, not headless."""
    headless = not service.cluster_ips or service.cluster_ips[0] == "None"
    if service.type is ServiceType.EXTERNAL_NAME or headless:
        return False
    return _is_ours(service, settings)


def health_check_node_port(service: Service) -> int | None:
    """The port kube-proxy serves this service's health checks on, if it has one."""
    if (
        service.type is ServiceType.LOAD_BALANCER
        and service.external_traffic_policy is TrafficPolicy.LOCAL
        and service.health_check_node_port
    ):
        return service.health_check_node_port
    return None


def health_check_families(found: ServiceState, node: NodeFacts) -> set[IPFamily]:
    """The families whose KUBE-HEALTH-CHECK-NODE-PORT set opens the service's health-check
    node port: those it has virtual servers in, where the node has NodePort addresses.

    The health-check server listens on those addresses alone; with none of a family (a
    --nodeport-addresses that matches nothing) there is nothing to let packets through to.
    """
    families = {IPFamily.of(vs_key.address) for vs_key in found.servers}
    return {f for f in families if any(IPFamily.of(a) is f for a in node.node_port_addresses)}


def translate_service(
    service: Service,
    slices: list[EndpointSlice],
    settings: Settings,
    nodes: tuple[NodeFacts, Mapping[IPAddress, str]],
    addresses: AddressCache,
    *,
    cache: ServiceCache,
) -> ServiceState | Rejection:
    """One proxied service's share of the desired state, or why it has none; ``nodes``: this
    node, and every Node's addresses (the ones a ``cache`` was last given)."""
    translate_one = partial(_service_state, service, slices, settings, nodes, addresses)
    try:
        return cache.service_state(service, slices, translate_one)
    except _Rejected as error:
        return Rejection(f"Service {service.key}", str(error))
