"""Frozen value types shared by every stage; of the project this module imports only
``quick_init``, which builds them fast.

Three groups live here:

* the slim cluster objects that ``cluster`` builds from API JSON and ``translate`` reads
  (Service, EndpointSlice, Node, ClusterSnapshot);
* the kernel-neutral IPVS, address and ipset values that ``kernel`` reads and writes;
* the desired state that ``translate`` produces and the typed operations that ``reconcile``
  plans and ``kernel`` applies.
"""

from __future__ import annotations

import enum
import ipaddress
import socket
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import assert_never

from ipvsproxy.frozen_init import quick_init

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def address_sort_key(address: IPAddress) -> tuple[int, int]:
    """Total order over mixed IPv4/IPv6 addresses (ipaddress refuses to compare them)."""
    return (address.version, int(address))


class TransportProtocol(enum.StrEnum):
    TCP = "TCP"
    UDP = "UDP"
    SCTP = "SCTP"


# The IP protocol numbers by which IPVS, conntrack, ipsets and iptables-save know them.
IP_PROTOCOL_NUMBERS: Mapping[TransportProtocol, int] = MappingProxyType(
    {
        TransportProtocol.TCP: socket.IPPROTO_TCP,
        TransportProtocol.UDP: socket.IPPROTO_UDP,
        TransportProtocol.SCTP: socket.IPPROTO_SCTP,
    }
)
PROTOCOLS_BY_NUMBER: Mapping[int, TransportProtocol] = MappingProxyType(
    {number: protocol for protocol, number in IP_PROTOCOL_NUMBERS.items()}
)


class IPFamily(enum.StrEnum):
    IPV4 = "IPv4"
    IPV6 = "IPv6"

    @classmethod
    def of(cls, address: IPAddress | IPNetwork) -> IPFamily:
        return cls.IPV4 if address.version == 4 else cls.IPV6


# ---------------------------------------------------------------------------------------------
# Cluster objects (slim: only what the proxy reads)
# ---------------------------------------------------------------------------------------------


@quick_init
@dataclass(frozen=True, slots=True)
class ObjectKey:
    namespace: str
    name: str
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.namespace, self.name)))

    def __hash__(self) -> int:
        # Every store, index and claim of a translation is keyed by these: hash once.
        return self._hash

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@quick_init
@dataclass(frozen=True, slots=True)
class ServicePortName:
    """One port of one Service: kube-proxy's ServicePortName."""

    service: ObjectKey
    port_name: str
    protocol: TransportProtocol

    def __str__(self) -> str:
        suffix = f":{self.port_name}" if self.port_name else ""
        return f"{self.service}{suffix}"


class ServiceType(enum.StrEnum):
    CLUSTER_IP = "ClusterIP"
    NODE_PORT = "NodePort"
    LOAD_BALANCER = "LoadBalancer"
    EXTERNAL_NAME = "ExternalName"


class TrafficPolicy(enum.StrEnum):
    CLUSTER = "Cluster"
    LOCAL = "Local"


# The two traffic policies a Service has, by the names kube-proxy's metrics label them with.
TRAFFIC_POLICY_SCOPES = ("internal", "external")


@quick_init
@dataclass(frozen=True, slots=True)
class ServicePort:
    name: str
    protocol: TransportProtocol
    port: int
    target_port: int | str | None = None
    node_port: int | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class LoadBalancerIngress:
    ip: IPAddress
    # "VIP" (default) or "Proxy": kube-proxy leaves Proxy-mode ingress IPs to the load balancer.
    ip_mode: str = "VIP"


@quick_init
@dataclass(frozen=True, slots=True)
class Service:
    """A Service as the proxy sees it, already type-checked field by field by ``cluster``.

    Values that could not be parsed are kept as raw strings in the tuples below only where
    ``translate`` must reject just one port or address; everything else is typed.
    """

    key: ObjectKey
    type: ServiceType
    cluster_ips: tuple[str, ...] = ()
    ports: tuple[ServicePort, ...] = ()
    external_ips: tuple[str, ...] = ()
    load_balancer_ingress: tuple[LoadBalancerIngress, ...] = ()
    load_balancer_source_ranges: tuple[str, ...] = ()
    session_affinity_timeout: int | None = None
    external_traffic_policy: TrafficPolicy = TrafficPolicy.CLUSTER
    internal_traffic_policy: TrafficPolicy = TrafficPolicy.CLUSTER
    health_check_node_port: int | None = None
    traffic_distribution: str | None = None
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    annotations: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    resource_version: str = ""
    # metadata.creationTimestamp (RFC 3339, UTC, so it orders as text); "" when unknown.
    # Between two services claiming one address, the older keeps it.
    created: str = ""
    # metadata.uid: events about the service name it, as ``kubectl describe`` looks them up.
    uid: str = ""


@quick_init
@dataclass(frozen=True, slots=True)
class EndpointConditions:
    # The API's nil means "unknown"; kube-proxy treats nil ready as ready and derives
    # serving from ready when it is nil. ``cluster`` applies those defaults.
    ready: bool = True
    serving: bool = True
    terminating: bool = False


@quick_init
@dataclass(frozen=True, slots=True)
class Endpoint:
    addresses: tuple[str, ...]
    conditions: EndpointConditions = EndpointConditions()
    node_name: str | None = None
    zone: str | None = None
    hints_for_zones: tuple[str, ...] | None = None
    hints_for_nodes: tuple[str, ...] | None = None
    # The address kube-proxy programs, addresses[0], as ``cluster`` parsed and checked it
    # against the slice's addressType; None in an FQDN slice. Derived, so not compared.
    first_address: IPAddress | None = field(default=None, compare=False)


@quick_init
@dataclass(frozen=True, slots=True)
class EndpointPort:
    name: str
    port: int | None
    protocol: TransportProtocol


@quick_init
@dataclass(frozen=True, slots=True)
class EndpointSlice:
    key: ObjectKey
    service_name: str
    address_type: str
    endpoints: tuple[Endpoint, ...] = ()
    ports: tuple[EndpointPort, ...] = ()
    resource_version: str = ""
    # endpoints.kubernetes.io/last-change-trigger-time, seconds since the epoch.
    trigger_time: float | None = None

    @property
    def service(self) -> ObjectKey:
        return ObjectKey(self.key.namespace, self.service_name)


@quick_init
@dataclass(frozen=True, slots=True)
class Node:
    name: str
    addresses: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # spec.podCIDRs, unparsed: --detect-local-mode=NodeCIDR tells local traffic by them.
    pod_cidrs: tuple[str, ...] = ()
    # The keys of spec.taints, and whether metadata.deletionTimestamp is set: /healthz reports
    # a node on its way out as not eligible, so load balancers stop sending to it.
    taints: tuple[str, ...] = ()
    deleting: bool = False

    @property
    def zone(self) -> str | None:
        return self.labels.get("topology.kubernetes.io/zone")


@quick_init
@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """Everything the proxy knows of the cluster at one instant, from the API or a file, and
    of this node's own interfaces."""

    services: Mapping[ObjectKey, Service]
    endpoint_slices: Mapping[ObjectKey, EndpointSlice]
    node: Node | None = None
    # Every Node's addresses (this one's too), each with its Node's name: a Service may not
    # take one, or it would cut the cluster off from that node (or hand its ports to a pod).
    nodes_by_address: Mapping[IPAddress, str] = field(default_factory=lambda: MappingProxyType({}))
    # The addresses of the node's interfaces (kube-ipvs0's aside), as the kernel has them:
    # kube-proxy's NodePort and "is this address the node's" decisions come from these, not
    # from the Node object. None where the kernel was not read (a plan against no kernel).
    local_addresses: frozenset[IPAddress] | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class ChangedKeys:
    """The Services and EndpointSlices that may differ from the previous reading of the
    cluster: only these need comparing."""

    services: frozenset[ObjectKey]
    endpoint_slices: frozenset[ObjectKey]


class SkipReason(enum.StrEnum):
    """Why something was skipped, as a metric label (``ipvsproxy_objects_skipped_total``)."""

    INVALID = "invalid"
    DUPLICATE = "duplicate"
    ADDRESS_CONFLICT = "address_conflict"
    UNUSABLE_ADDRESS = "unusable_address"
    EXTERNAL_IP_NOT_ALLOWED = "external_ip_not_allowed"
    # A service address that is a Node's own address.
    NODE_ADDRESS = "node_address"
    # A node port outside --service-node-port-range, or on a port the node serves itself.
    NODE_PORT_NOT_ALLOWED = "node_port_not_allowed"


@quick_init
@dataclass(frozen=True, slots=True)
class Rejection:
    """Why one object, or one port or address of it, produced nothing. Logged and counted."""

    object: str
    reason: str
    category: SkipReason = SkipReason.INVALID


# ---------------------------------------------------------------------------------------------
# Kernel values: IPVS
# ---------------------------------------------------------------------------------------------


class ForwardMethod(enum.IntEnum):
    """IP_VS_CONN_F_FWD_MASK values. Masquerade is 0 (pyroute2 defaults to 3, direct routing)."""

    MASQUERADE = 0
    LOCAL = 1
    TUNNEL = 2
    ROUTE = 3
    BYPASS = 4


class ServiceFlags(enum.IntFlag):
    """IP_VS_SVC_F_* as the kernel defines them. HASHED is kernel-internal and never written."""

    NONE = 0
    PERSISTENT = 0x0001
    HASHED = 0x0002
    ONEPACKET = 0x0004
    SCHED1 = 0x0008  # sh/mh: fallback
    SCHED2 = 0x0010  # sh/mh: port
    SCHED3 = 0x0020


SCHEDULERS = frozenset(
    {"rr", "wrr", "lc", "wlc", "lblc", "lblcr", "dh", "sh", "sed", "nq", "mh", "fo", "ovf"}
)


@quick_init
@dataclass(frozen=True, slots=True)
class VirtualServerKey:
    protocol: TransportProtocol
    address: IPAddress
    port: int
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.protocol, self.address, self.port)))

    def __hash__(self) -> int:
        # ipaddress rehashes through hex() on every call, and a sync looks keys up about a
        # million times at 10,000 services: hash once.
        return self._hash

    def __str__(self) -> str:
        host = f"[{self.address}]" if self.address.version == 6 else str(self.address)
        return f"{self.protocol} {host}:{self.port}"

    def sort_key(self) -> tuple[tuple[int, int], int, str]:
        return (address_sort_key(self.address), self.port, self.protocol.value)


@quick_init
@dataclass(frozen=True, slots=True)
class VirtualServer:
    key: VirtualServerKey
    scheduler: str = "rr"
    flags: ServiceFlags = ServiceFlags.NONE
    timeout: int = 0  # persistence, seconds; 0 unless PERSISTENT


@quick_init
@dataclass(frozen=True, slots=True)
class RealServerKey:
    address: IPAddress
    port: int
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # int(address) rather than the address: ipaddress hashes through hex(). Equal keys
        # still hash equal; an IPv4 and an IPv6 address of the same value merely collide.
        object.__setattr__(self, "_hash", hash((int(self.address), self.port)))

    def __hash__(self) -> int:
        return self._hash  # hashed once, as VirtualServerKey

    def __eq__(self, other: object) -> bool:
        # A diff compares the keys of a table read from the kernel with the translation's,
        # some 300,000 times at 10,000 services: the stored hash tells most unequal keys
        # apart, and no tuples of fields are built for the rest.
        if type(other) is not RealServerKey:
            return NotImplemented
        return (
            self._hash == other._hash
            and self.port == other.port
            and (self.address is other.address or self.address == other.address)
        )

    def __str__(self) -> str:
        host = f"[{self.address}]" if self.address.version == 6 else str(self.address)
        return f"{host}:{self.port}"

    def sort_key(self) -> tuple[tuple[int, int], int]:
        return (address_sort_key(self.address), self.port)


@quick_init
@dataclass(frozen=True, slots=True)
class RealServer:
    key: RealServerKey
    weight: int = 1
    forward: ForwardMethod = ForwardMethod.MASQUERADE
    upper_threshold: int = 0
    lower_threshold: int = 0

    def same_settings(self, other: RealServer) -> bool:
        """Equal but for the key: what a diff asks once it has matched the keys."""
        return (
            self.weight == other.weight
            and self.forward == other.forward
            and self.upper_threshold == other.upper_threshold
            and self.lower_threshold == other.lower_threshold
        )


@quick_init
@dataclass(frozen=True, slots=True)
class TrafficStats:
    connections: int = 0
    packets_in: int = 0
    packets_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0


@quick_init
@dataclass(frozen=True, slots=True)
class RealServerState:
    """A real server as dumped from the kernel, with its live counters."""

    server: RealServer
    active_connections: int = 0
    inactive_connections: int = 0
    persistent_connections: int = 0
    stats: TrafficStats = TrafficStats()


@quick_init
@dataclass(frozen=True, slots=True)
class VirtualServerState:
    """A virtual server as dumped from the kernel, with its real servers and counters."""

    server: VirtualServer
    real_servers: Mapping[RealServerKey, RealServerState]
    stats: TrafficStats = TrafficStats()


IPVSTable = Mapping[VirtualServerKey, VirtualServerState]


# ---------------------------------------------------------------------------------------------
# Kernel values: ipsets
# ---------------------------------------------------------------------------------------------


@quick_init
@dataclass(frozen=True, slots=True)
class IPSetSpec:
    """A set's identity and type; ``entries`` are in ipset(8) syntax, e.g. ``10.96.0.10,tcp:80``."""

    name: str
    set_type: str  # "hash:ip,port", "hash:ip,port,ip", "hash:ip,port,net", "bitmap:port", ...
    family: IPFamily = IPFamily.IPV4
    comment: str = ""
    # Creation options a set read from the kernel has beyond kube-proxy's (hash types:
    # maxelem 65536; bitmap:port: range 0-65535), as ipset(8) prints them: "maxelem 1024",
    # "timeout 300", "counters". A set kube-proxy or ipvsproxy made has none.
    options: tuple[str, ...] = ()


@quick_init
@dataclass(frozen=True, slots=True)
class IPSetContent:
    spec: IPSetSpec
    entries: AbstractSet[str] = frozenset()


# ---------------------------------------------------------------------------------------------
# Kernel values: iptables
# ---------------------------------------------------------------------------------------------


# The dummy interface kube-proxy's IPVS mode binds service addresses to.
DUMMY_INTERFACE = "kube-ipvs0"

# The chains kube-proxy's IPVS mode creates, per table, in its order (iptablesChains); the
# same names are the ones cleanup deletes. Other KUBE-* chains (kubelet's KUBE-FIREWALL,
# KUBE-KUBELET-CANARY, iptables mode's KUBE-SVC-*) are not ours.
IPTABLES_CHAINS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "nat": (
            "KUBE-SERVICES",
            "KUBE-POSTROUTING",
            "KUBE-NODE-PORT",
            "KUBE-LOAD-BALANCER",
            "KUBE-MARK-MASQ",
        ),
        "filter": (
            "KUBE-FORWARD",
            "KUBE-NODE-PORT",
            "KUBE-PROXY-FIREWALL",
            "KUBE-SOURCE-RANGES-FIREWALL",
            "KUBE-IPVS-FILTER",
            "KUBE-IPVS-OUT-FILTER",
        ),
    }
)


@quick_init
@dataclass(frozen=True, slots=True)
class IptablesJump:
    """A rule in a built-in chain that sends packets into one of our chains."""

    table: str
    chain: str
    target: str
    comment: str
    match: tuple[str, ...] = ()


@quick_init
@dataclass(frozen=True, slots=True)
class IptablesRuleset:
    """Our chains and their rules for one family, written whole by one iptables-restore.

    ``chains`` maps table -> chain -> rule arguments (each rule without ``-A CHAIN``).
    """

    family: IPFamily
    chains: Mapping[str, Mapping[str, tuple[tuple[str, ...], ...]]]
    jumps: tuple[IptablesJump, ...] = ()


@quick_init
@dataclass(frozen=True, slots=True)
class IptablesChainDiff:
    """How one of our chains (or a built-in chain's jumps to ours) would change: rules as
    iptables-save prints them, without ``-A CHAIN``."""

    family: IPFamily
    table: str
    chain: str
    # The chain does not exist yet.
    new: bool
    added: tuple[str, ...]
    removed: tuple[str, ...]


# ---------------------------------------------------------------------------------------------
# Operations: what reconcile plans and kernel applies, one by one or batched
# ---------------------------------------------------------------------------------------------


@quick_init
@dataclass(frozen=True, slots=True)
class AddVirtualServer:
    server: VirtualServer


@quick_init
@dataclass(frozen=True, slots=True)
class UpdateVirtualServer:
    server: VirtualServer


@quick_init
@dataclass(frozen=True, slots=True)
class DeleteVirtualServer:
    key: VirtualServerKey


@quick_init
@dataclass(frozen=True, slots=True)
class AddRealServer:
    virtual: VirtualServerKey
    server: RealServer


@quick_init
@dataclass(frozen=True, slots=True)
class UpdateRealServer:
    virtual: VirtualServerKey
    server: RealServer


@quick_init
@dataclass(frozen=True, slots=True)
class DeleteRealServer:
    virtual: VirtualServerKey
    key: RealServerKey


IPVSOp = (
    AddVirtualServer
    | UpdateVirtualServer
    | DeleteVirtualServer
    | AddRealServer
    | UpdateRealServer
    | DeleteRealServer
)
# The same classes, for isinstance().
IPVS_OPS = (
    AddVirtualServer,
    UpdateVirtualServer,
    DeleteVirtualServer,
    AddRealServer,
    UpdateRealServer,
    DeleteRealServer,
)


def virtual_of(op: IPVSOp) -> VirtualServerKey:
    """The virtual server an IPVS op writes, or whose real server it writes."""
    match op:
        case AddVirtualServer(server) | UpdateVirtualServer(server):
            return server.key
        case DeleteVirtualServer(key):
            return key
        case AddRealServer(virtual) | UpdateRealServer(virtual) | DeleteRealServer(virtual):
            return virtual
        case _:
            assert_never(op)


@quick_init
@dataclass(frozen=True, slots=True)
class BindAddress:
    address: IPAddress


@quick_init
@dataclass(frozen=True, slots=True)
class UnbindAddress:
    address: IPAddress


AddressOp = BindAddress | UnbindAddress


@quick_init
@dataclass(frozen=True, slots=True)
class OpError:
    """The kernel refused one operation of a batch; the others were applied regardless."""

    errno: int
    message: str


# One entry per submitted op, in order: None when it applied.
BatchResult = list[OpError | None]


@quick_init
@dataclass(frozen=True, slots=True)
class IPVSTimeouts:
    """The kernel's IPVS connection timeouts in seconds (ipvsadm --set); 0 leaves one as is."""

    tcp: int = 0
    tcp_fin: int = 0
    udp: int = 0

    def set_over(self, held: IPVSTimeouts) -> IPVSTimeouts:
        """What the kernel holds once these are set over ``held`` (0 leaves one as it is)."""
        return IPVSTimeouts(
            tcp=self.tcp or held.tcp,
            tcp_fin=self.tcp_fin or held.tcp_fin,
            udp=self.udp or held.udp,
        )


@quick_init
@dataclass(frozen=True, slots=True)
class SetIPVSTimeouts:
    timeouts: IPVSTimeouts


@quick_init
@dataclass(frozen=True, slots=True)
class SetSysctl:
    """Set a kernel parameter kube-proxy's IPVS mode needs; ``current``: its value before."""

    name: str
    value: str
    current: str | None


@quick_init
@dataclass(frozen=True, slots=True)
class RealServerRef:
    """One real server of one virtual server: the unit graceful termination works on."""

    virtual: VirtualServerKey
    real: RealServerKey

    def __str__(self) -> str:
        return f"{self.real} on {self.virtual}"


@quick_init
@dataclass(frozen=True, slots=True)
class EnsureInterface:
    name: str


@quick_init
@dataclass(frozen=True, slots=True)
class CreateIPSet:
    spec: IPSetSpec


@quick_init
@dataclass(frozen=True, slots=True)
class AddIPSetEntries:
    name: str
    entries: tuple[str, ...]


@quick_init
@dataclass(frozen=True, slots=True)
class DeleteIPSetEntries:
    name: str
    entries: tuple[str, ...]


@quick_init
@dataclass(frozen=True, slots=True)
class ReplaceIPSet:
    """The set exists with another type or options than ours: a new one holding ``content``
    is made beside it and swapped in under its name, then the old one goes. Rules that match
    the set never see it missing or empty (the kernel swaps only sets of the same type and
    family; it refuses another type, and the set is then left as it is)."""

    content: IPSetContent


IPSetOp = CreateIPSet | AddIPSetEntries | DeleteIPSetEntries | ReplaceIPSet


@quick_init
@dataclass(frozen=True, slots=True)
class RestoreIptables:
    """Written only when the kernel's chains differ; the kernel layer decides."""

    ruleset: IptablesRuleset


@quick_init
@dataclass(frozen=True, slots=True)
class FlushConntrack:
    """Forget the flows to ``virtual`` NATed to ``real``, so UDP/SCTP clients pick a live one."""

    virtual: VirtualServerKey
    real: RealServerKey


PlanOp = (
    SetSysctl
    | EnsureInterface
    | AddressOp
    | IPSetOp
    | RestoreIptables
    | SetIPVSTimeouts
    | IPVSOp
    | FlushConntrack
)


# ---------------------------------------------------------------------------------------------
# Desired state: what translate computes and reconcile makes true
# ---------------------------------------------------------------------------------------------


class AddressKind(enum.StrEnum):
    CLUSTER_IP = "ClusterIP"
    EXTERNAL_IP = "ExternalIP"
    LOAD_BALANCER = "LoadBalancer"
    NODE_PORT = "NodePort"


@quick_init
@dataclass(frozen=True, slots=True)
class DesiredVirtualServer:
    server: VirtualServer
    real_servers: Mapping[RealServerKey, RealServer]
    owner: ServicePortName
    kind: AddressKind


@quick_init
@dataclass(frozen=True, slots=True)
class DesiredState:
    virtual_servers: Mapping[VirtualServerKey, DesiredVirtualServer]
    # Addresses to bind on kube-ipvs0 (cluster, external and load-balancer IPs).
    bound_addresses: AbstractSet[IPAddress]
    # The node's own addresses that carry our virtual servers (NodePorts); never bound on
    # kube-ipvs0.
    node_addresses: AbstractSet[IPAddress]
    ipsets: Mapping[str, IPSetContent]
    iptables: tuple[IptablesRuleset, ...]
    # Virtual servers inside these are someone else's: never touched (--ipvs-exclude-cidrs).
    exclude_cidrs: tuple[IPNetwork, ...] = ()
    # Every address NodePorts may use, whether one exists now or not: what is left on them is
    # ours to clean up once the last NodePort service goes.
    node_port_addresses: frozenset[IPAddress] = frozenset()
    health_check_node_ports: Mapping[ObjectKey, int] = field(
        default_factory=lambda: MappingProxyType({})
    )
    # Services with a Local traffic policy and endpoints, none of them on this node, by
    # scope ("internal", "external"): kubeproxy_sync_proxy_rules_no_local_endpoints_total.
    no_local_endpoints: Mapping[str, int] = field(
        default_factory=lambda: MappingProxyType(dict.fromkeys(TRAFFIC_POLICY_SCOPES, 0))
    )
    rejections: tuple[Rejection, ...] = ()

    def skipped_by_reason(self) -> dict[SkipReason, int]:
        """How many things were skipped, by reason: every reason present, zeros included."""
        counts = dict.fromkeys(SkipReason, 0)
        for rejection in self.rejections:
            counts[rejection.category] += 1
        return counts


@quick_init
@dataclass(frozen=True, slots=True)
class DesiredChange:
    """How a desired state differs from the one before it, as an incremental translation
    found while making it: planning from this costs the change, not the cluster."""

    # Each virtual server added, changed or removed, with its value before (None: not desired).
    virtual_servers: Mapping[VirtualServerKey, DesiredVirtualServer | None]
    # Entries by set name; the sets themselves always exist.
    added_entries: Mapping[str, frozenset[str]]
    removed_entries: Mapping[str, frozenset[str]]
    bound: frozenset[IPAddress]
    unbound: frozenset[IPAddress]
    # The iptables rules differ from the previous desired state's.
    iptables: bool
