"""API JSON (camelCase dicts, as the API sends them) to slim model objects.

Plain dict walking rather than the kubernetes client's generated classes: those cost too much
at 10,000 services. Malformed objects become Rejections, never exceptions.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import sys
from collections.abc import Callable, Collection, Iterable, Mapping
from datetime import datetime
from functools import partial
from types import MappingProxyType
from typing import Any

from ipvsproxy.address_rules import ipv4_unusable_reason, unusable_reason
from ipvsproxy.cluster.validation import (
    is_dns1035_label,
    is_dns1123_label,
    is_dns1123_subdomain,
)
from ipvsproxy.gcpause import without_cyclic_gc
from ipvsproxy.model import (
    ClusterSnapshot,
    Endpoint,
    EndpointConditions,
    EndpointPort,
    EndpointSlice,
    IPAddress,
    LoadBalancerIngress,
    Node,
    ObjectKey,
    Rejection,
    Service,
    ServicePort,
    ServiceType,
    SkipReason,
    TrafficPolicy,
    TransportProtocol,
)
from ipvsproxy.names import PROXY_NAME_LABEL, SCHEDULER_ANNOTATION

DEFAULT_AFFINITY_TIMEOUT = 10800
MAX_AFFINITY_TIMEOUT = 86400
MISSING_NODE = (
    "not found (check --hostname-override): NodePorts, Local traffic policy and zone hints need it"
)
_PROTOCOLS = {p.value: p for p in TransportProtocol}
_ADDRESS_VERSIONS = {"IPv4": 4, "IPv6": 6}
# As the API server writes metadata.creationTimestamp: RFC 3339 in UTC, whole seconds.
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
_SERVICE_TYPES = {t.value: t for t in ServiceType}
# The Service labels and annotations translate reads; the others are not kept.
SERVICE_LABELS_READ = (PROXY_NAME_LABEL,)
SERVICE_ANNOTATIONS_READ = (SCHEDULER_ANNOTATION,)


class ParseError(ValueError):
    """One object, or one field of it, is malformed; callers turn it into a Rejection."""

    def __init__(self, message: str, category: SkipReason = SkipReason.INVALID) -> None:
        super().__init__(message)
        self.category = category


_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    # JSON decoding gives plain dicts: test for that before the (slow) ABC check.
    if type(value) is dict:
        return value
    if value is None:
        return _EMPTY
    if not isinstance(value, Mapping):
        raise ParseError(f"{what} is not an object")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ParseError(f"{what} is not a list")
    return value


def _str(value: Any, what: str, default: str = "") -> str:
    if value is None:
        return default
    if not isinstance(value, str):
        raise ParseError(f"{what} is not a string")
    return value


def _int(value: Any, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParseError(f"{what} is not an integer")
    return value


def _bool(value: Any, what: str) -> bool | None:
    if value is None:
        return None
    if not isinstance(value, bool):
        raise ParseError(f"{what} is not a boolean")
    return value


def _repeated(value: Any, what: str, default: str = "") -> str:
    """A string that many objects carry (a namespace, a node, zone or port name), kept once
    for all of them. Interned strings are freed when the last object holding one goes."""
    return sys.intern(_str(value, what, default))


def _str_map(value: Any, what: str, read: Collection[str] | None = None) -> Mapping[str, str]:
    """Checked whole; with ``read``, only those keys are kept (what the proxy looks at: the
    rest, kubectl's last-applied-configuration among it, would be held for nothing)."""
    raw = _mapping(value, what)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        raise ParseError(f"{what} has non-string entries")
    kept = dict(raw) if read is None else {k: raw[k] for k in read if k in raw}
    return MappingProxyType(kept) if kept else _EMPTY


def _str_tuple(value: Any, what: str) -> tuple[str, ...]:
    items = _list(value, what)
    for item in items:
        if not isinstance(item, str):
            raise ParseError(f"{what} has non-string entries")
    return tuple(items)


def _protocol(value: Any, what: str) -> TransportProtocol:
    name = _str(value, what, default="TCP")
    try:
        return _PROTOCOLS[name]
    except KeyError:
        raise ParseError(f"{what}: unknown protocol {name!r}") from None


def object_key(
    obj: Mapping[str, Any],
    *,
    namespaced: bool = True,
    valid_name: Callable[[str], bool] = is_dns1123_subdomain,
) -> ObjectKey:
    metadata = _mapping(obj.get("metadata"), "metadata")
    name = _str(metadata.get("name"), "metadata.name")
    if not name:
        raise ParseError("metadata.name is missing")
    if not valid_name(name):
        raise ParseError(f"metadata.name {name!r} is not a valid Kubernetes name")
    namespace = _repeated(metadata.get("namespace"), "metadata.namespace", default="default")
    if namespaced and not is_dns1123_label(namespace):
        raise ParseError(f"metadata.namespace {namespace!r} is not a valid Kubernetes name")
    return ObjectKey(namespace if namespaced else "", name)


def describe(obj: Mapping[str, Any]) -> str:
    """A best-effort name for an object that may be too broken to parse."""
    raw_kind = obj.get("kind")
    kind = raw_kind if isinstance(raw_kind, str) else "object"
    metadata = obj.get("metadata")
    if isinstance(metadata, Mapping):
        name, namespace = metadata.get("name"), metadata.get("namespace")
        if isinstance(name, str):
            shown = f"{namespace}/{name}" if isinstance(namespace, str) else name
            return f"{_quoted(kind)} {_quoted(shown)}"
    return f"{_quoted(kind)} (unnamed)"


def _quoted(text: str) -> str:
    """Raw text from an object, quoted when it could break or forge the line it is shown in."""
    return text if text.isprintable() and " " not in text else repr(text)


def _service_port(raw: Any, index: int) -> ServicePort:
    spec = _mapping(raw, f"spec.ports[{index}]")
    what = f"spec.ports[{index}]"
    port = _int(spec.get("port"), f"{what}.port")
    if port is None or not 1 <= port <= 65535:
        raise ParseError(f"{what}.port {port} is outside 1-65535")
    node_port = _int(spec.get("nodePort"), f"{what}.nodePort")
    if node_port is not None and node_port != 0 and not 1 <= node_port <= 65535:
        raise ParseError(f"{what}.nodePort {node_port} is outside 1-65535")
    target = spec.get("targetPort")
    if target is not None and (isinstance(target, bool) or not isinstance(target, int | str)):
        raise ParseError(f"{what}.targetPort is neither a number nor a name")
    name = _repeated(spec.get("name"), f"{what}.name")
    if name and not is_dns1123_label(name):
        raise ParseError(f"{what}.name {name!r} is not a valid port name")
    return ServicePort(
        name=name,
        protocol=_protocol(spec.get("protocol"), f"{what}.protocol"),
        port=port,
        target_port=target,
        node_port=node_port or None,
    )


def _service_ports(raw: Any, label: str, rejections: list[Rejection]) -> tuple[ServicePort, ...]:
    """Each bad or conflicting port is dropped on its own; the service keeps the rest."""
    ports: list[ServicePort] = []
    seen_names: set[str] = set()
    seen_numbers: set[tuple[TransportProtocol, int]] = set()
    for index, item in enumerate(_list(raw, "spec.ports")):
        try:
            port = _service_port(item, index)
        except ParseError as error:
            rejections.append(Rejection(label, str(error)))
            continue
        if port.name in seen_names or (port.protocol, port.port) in seen_numbers:
            rejections.append(
                Rejection(label, f"spec.ports[{index}] duplicates another port's name or number")
            )
            continue
        seen_names.add(port.name)
        seen_numbers.add((port.protocol, port.port))
        ports.append(port)
    return tuple(ports)


def _affinity_timeout(spec: Mapping[str, Any]) -> int | None:
    affinity = _str(spec.get("sessionAffinity"), "spec.sessionAffinity", default="None")
    if affinity != "ClientIP":
        return None
    config = _mapping(spec.get("sessionAffinityConfig"), "spec.sessionAffinityConfig")
    client_ip = _mapping(config.get("clientIP"), "spec.sessionAffinityConfig.clientIP")
    timeout = _int(client_ip.get("timeoutSeconds"), "timeoutSeconds")
    if timeout is None:
        return DEFAULT_AFFINITY_TIMEOUT
    if not 1 <= timeout <= MAX_AFFINITY_TIMEOUT:
        raise ParseError(f"sessionAffinity timeoutSeconds {timeout} is outside 1-86400")
    return timeout


def _policy(value: Any, what: str) -> TrafficPolicy:
    return TrafficPolicy.LOCAL if _str(value, what) == "Local" else TrafficPolicy.CLUSTER


def _created(metadata: Mapping[str, Any], label: str, rejections: list[Rejection]) -> str:
    created = metadata.get("creationTimestamp")
    if created is None:
        return ""
    if isinstance(created, str) and _TIMESTAMP.fullmatch(created):
        return created
    rejections.append(
        Rejection(
            label,
            f"metadata.creationTimestamp {created!r} is not an RFC 3339 UTC time; "
            "taken as the newest in address conflicts",
        )
    )
    return ""


def _health_check_node_port(
    spec: Mapping[str, Any], label: str, rejections: list[Rejection]
) -> int | None:
    """The port, or None; one outside 1-65535 is ignored (its ipset entry would be refused)."""
    port = _int(spec.get("healthCheckNodePort"), "healthCheckNodePort")
    if port is None or port == 0:
        return None
    if 1 <= port <= 65535:
        return port
    rejections.append(
        Rejection(label, f"spec.healthCheckNodePort {port} is outside 1-65535; ignored")
    )
    return None


def _check_programmable(
    service: Service, spec: Mapping[str, Any] | None, rejections: list[Rejection]
) -> None:
    """Say why a Service that is not headless or ExternalName will program nothing.

    Ports that were each refused already say why; only a Service that lists none is named.
    """
    label = f"Service {service.key}"
    if service.type is ServiceType.EXTERNAL_NAME or service.cluster_ips[:1] == ("None",):
        return
    if spec is None:
        rejections.append(Rejection(label, "has no spec; nothing to program"))
    elif not service.cluster_ips:
        rejections.append(
            Rejection(label, "has no clusterIP (not allocated: never applied?); nothing to program")
        )
    elif not spec.get("ports"):
        rejections.append(Rejection(label, "has no ports; nothing to program"))


def _ingress(raw: Any, label: str, rejections: list[Rejection]) -> tuple[LoadBalancerIngress, ...]:
    """The ingress IPs; one that does not parse is dropped alone, with a warning."""
    result: list[LoadBalancerIngress] = []
    for index, item in enumerate(_list(raw, "status.loadBalancer.ingress")):
        entry = _mapping(item, f"status.loadBalancer.ingress[{index}]")
        ip = _str(entry.get("ip"), f"ingress[{index}].ip")
        if not ip:
            continue  # hostname-only ingress: nothing for the proxy to program
        try:
            address = ipaddress.ip_address(ip)
        except ValueError:
            message = (
                f"status.loadBalancer.ingress[{index}].ip {ip!r} is not an IP address; ignored"
            )
            rejections.append(Rejection(label, message))
            continue
        mode = _str(entry.get("ipMode"), f"ingress[{index}].ipMode", default="VIP")
        result.append(LoadBalancerIngress(address, mode))
    return tuple(result)


def parse_service(obj: Mapping[str, Any]) -> tuple[Service | None, list[Rejection]]:
    """A Service, or None with the reason; port-level problems drop only that port."""
    label = ""  # named once the key parses; a broken object is described only on error
    rejections: list[Rejection] = []
    try:
        key = object_key(obj, valid_name=is_dns1035_label)
        label = f"Service {key}"
        metadata = _mapping(obj.get("metadata"), "metadata")
        spec = _mapping(obj.get("spec"), "spec")
        status = _mapping(obj.get("status"), "status")
        type_name = _str(spec.get("type"), "spec.type", default="ClusterIP")
        if type_name not in _SERVICE_TYPES:
            raise ParseError(f"unknown spec.type {type_name!r}")
        cluster_ips = _str_tuple(spec.get("clusterIPs"), "spec.clusterIPs")
        if not cluster_ips and spec.get("clusterIP"):
            cluster_ips = (_str(spec.get("clusterIP"), "spec.clusterIP"),)
        service = Service(
            key=key,
            type=_SERVICE_TYPES[type_name],
            cluster_ips=cluster_ips,
            ports=_service_ports(spec.get("ports"), label, rejections),
            external_ips=_str_tuple(spec.get("externalIPs"), "spec.externalIPs"),
            load_balancer_ingress=_ingress(
                _mapping(status.get("loadBalancer"), "status.loadBalancer").get("ingress"),
                label,
                rejections,
            ),
            load_balancer_source_ranges=_str_tuple(
                spec.get("loadBalancerSourceRanges"), "spec.loadBalancerSourceRanges"
            ),
            session_affinity_timeout=_affinity_timeout(spec),
            external_traffic_policy=_policy(
                spec.get("externalTrafficPolicy"), "spec.externalTrafficPolicy"
            ),
            internal_traffic_policy=_policy(
                spec.get("internalTrafficPolicy"), "spec.internalTrafficPolicy"
            ),
            health_check_node_port=_health_check_node_port(spec, label, rejections),
            traffic_distribution=_str(spec.get("trafficDistribution"), "trafficDistribution")
            or None,
            labels=_str_map(metadata.get("labels"), "metadata.labels", SERVICE_LABELS_READ),
            annotations=_str_map(
                metadata.get("annotations"), "metadata.annotations", SERVICE_ANNOTATIONS_READ
            ),
            resource_version=_str(metadata.get("resourceVersion"), "resourceVersion"),
            created=_created(metadata, label, rejections),
            uid=_str(metadata.get("uid"), "metadata.uid"),
        )
    except ParseError as error:
        return None, [
            *rejections,
            Rejection(label or describe({**obj, "kind": "Service"}), str(error)),
        ]
    raw_spec = obj.get("spec")
    _check_programmable(service, raw_spec if isinstance(raw_spec, Mapping) else None, rejections)
    return service, rejections


# Only eight distinct condition values exist: share them rather than build one per endpoint.
_CONDITIONS: dict[tuple[bool, bool, bool], EndpointConditions] = {
    (ready, serving, terminating): EndpointConditions(ready, serving, terminating)
    for ready in (False, True)
    for serving in (False, True)
    for terminating in (False, True)
}


def _conditions(raw: Any) -> EndpointConditions:
    if type(raw) is dict:
        # What the API sends: all three set, true booleans (type, not isinstance, so that
        # 0 and 1 still take the checked path below and are refused there).
        ready, serving, terminating = (
            raw.get("ready"),
            raw.get("serving"),
            raw.get("terminating"),
        )
        if type(ready) is bool and type(serving) is bool and type(terminating) is bool:
            return _CONDITIONS[ready, serving, terminating]
    conditions = _mapping(raw, "conditions")
    ready = _bool(conditions.get("ready"), "conditions.ready")
    serving = _bool(conditions.get("serving"), "conditions.serving")
    terminating = _bool(conditions.get("terminating"), "conditions.terminating")
    ready = True if ready is None else ready
    return _CONDITIONS[ready, ready if serving is None else serving, bool(terminating)]


def _hints(hints: Mapping[str, Any], field_name: str) -> tuple[str, ...] | None:
    if field_name not in hints:
        return None
    names: list[str] = []
    for item in _list(hints.get(field_name), f"hints.{field_name}"):
        names.append(_repeated(_mapping(item, f"hints.{field_name}[]").get("name"), "hint name"))
    return tuple(names)


def _endpoint_address(text: str, version: int | None, index: int) -> IPAddress | None:
    """kube-proxy programs an endpoint's first address: it must be usable, of the slice's type.
    None for an FQDN slice, whose addresses are not IP addresses."""
    if version is None:  # FQDN slices: left to translate, which handles none
        return None
    if version == 4:
        # inet_pton takes what ipaddress takes for IPv4, many times faster; a miss is
        # explained by the slow path below.
        try:
            value = int.from_bytes(socket.inet_pton(socket.AF_INET, text))
        except OSError:
            pass
        else:
            reason = ipv4_unusable_reason(value)
            if reason is not None:
                raise ParseError(
                    f"endpoints[{index}] address {text} is {reason}", SkipReason.UNUSABLE_ADDRESS
                )
            return ipaddress.IPv4Address(value)
    what = f"endpoints[{index}]"
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        raise ParseError(f"{what} address {text!r} is not an IP address") from None
    if address.version != version:
        raise ParseError(f"{what} address {text!r} is not IPv{version}, the slice's addressType")
    reason = unusable_reason(address)
    if reason is not None:
        raise ParseError(f"{what} address {text} is {reason}", SkipReason.UNUSABLE_ADDRESS)
    return address


def _endpoint(raw: Any, index: int, version: int | None) -> Endpoint:
    # The field path names only errors: built on the way to one, not for every endpoint.
    # The shape the API sends (one address, names as strings, no hints) takes no call it
    # does not need: a 10,000-service cluster has 100,000 endpoints, parse's largest cost.
    entry = raw if type(raw) is dict else _mapping(raw, f"endpoints[{index}]")
    raw_addresses = entry.get("addresses")
    if type(raw_addresses) is list and len(raw_addresses) == 1 and type(raw_addresses[0]) is str:
        addresses: tuple[str, ...] = (raw_addresses[0],)
    elif type(raw_addresses) is list and all(type(text) is str for text in raw_addresses):
        addresses = tuple(raw_addresses)
    else:
        addresses = _str_tuple(raw_addresses, f"endpoints[{index}].addresses")
    if not addresses:
        raise ParseError(f"endpoints[{index}] has no addresses")
    first_address = _endpoint_address(addresses[0], version, index)
    raw_hints = entry.get("hints")
    hints = _EMPTY if raw_hints is None else _mapping(raw_hints, "hints")
    return Endpoint(
        addresses=addresses,
        conditions=_conditions(entry.get("conditions")),
        node_name=_optional_repeated(entry.get("nodeName"), "nodeName"),
        zone=_optional_repeated(entry.get("zone"), "zone"),
        hints_for_zones=_hints(hints, "forZones") if hints else None,
        hints_for_nodes=_hints(hints, "forNodes") if hints else None,
        first_address=first_address,
    )


def _optional_repeated(value: Any, what: str) -> str | None:
    """_repeated, with None for a missing or empty string."""
    if type(value) is str:
        return sys.intern(value) if value else None
    return _repeated(value, what) or None


def _endpoint_port(raw: Any, index: int) -> EndpointPort:
    entry = _mapping(raw, f"ports[{index}]")
    port = _int(entry.get("port"), f"ports[{index}].port")
    if port is not None and not 1 <= port <= 65535:
        raise ParseError(f"ports[{index}].port {port} is outside 1-65535")
    name = _repeated(entry.get("name"), f"ports[{index}].name")
    if name and not is_dns1123_label(name):
        raise ParseError(f"ports[{index}].name {name!r} is not a valid port name")
    return EndpointPort(
        name=name,
        port=port,
        protocol=_protocol(entry.get("protocol"), f"ports[{index}].protocol"),
    )


TRIGGER_TIME_ANNOTATION = "endpoints.kubernetes.io/last-change-trigger-time"


def _trigger_time(annotations: Any) -> float | None:
    """When the change behind this slice happened, for the network programming latency; a
    value that is not an RFC 3339 time is only a missing measurement, never a rejection."""
    if not isinstance(annotations, Mapping):
        return None
    value = annotations.get(TRIGGER_TIME_ANNOTATION)
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment.timestamp() if moment.tzinfo is not None else None


def parse_endpoint_slice(
    obj: Mapping[str, Any],
) -> tuple[EndpointSlice | None, list[Rejection]]:
    """A slice, or None; a bad endpoint or port is dropped alone."""
    label = ""  # named once the key parses; a broken object is described only on error
    rejections: list[Rejection] = []
    try:
        key = object_key(obj)
        label = f"EndpointSlice {key}"
        metadata = _mapping(obj.get("metadata"), "metadata")
        labels = _str_map(metadata.get("labels"), "metadata.labels")
        service_name = labels.get("kubernetes.io/service-name", "")
        if not service_name:
            raise ParseError("no kubernetes.io/service-name label")
        address_type = _repeated(obj.get("addressType"), "addressType")
        version = _ADDRESS_VERSIONS.get(address_type)
        endpoints: list[Endpoint] = []
        for index, item in enumerate(_list(obj.get("endpoints"), "endpoints")):
            try:
                endpoints.append(_endpoint(item, index, version))
            except ParseError as error:
                rejections.append(Rejection(label, f"{error}; endpoint dropped", error.category))
        ports: list[EndpointPort] = []
        for index, item in enumerate(_list(obj.get("ports"), "ports")):
            try:
                ports.append(_endpoint_port(item, index))
            except ParseError as error:
                rejections.append(Rejection(label, str(error)))
        endpoint_slice = EndpointSlice(
            key=key,
            service_name=service_name,
            address_type=address_type,
            endpoints=tuple(endpoints),
            ports=tuple(ports),
            resource_version=_str(metadata.get("resourceVersion"), "resourceVersion"),
            trigger_time=_trigger_time(metadata.get("annotations")),
        )
    except ParseError as error:
        return None, [
            *rejections,
            Rejection(label or describe({**obj, "kind": "EndpointSlice"}), str(error)),
        ]
    return endpoint_slice, rejections


def _parses(parse: Callable[[str], object], text: str) -> bool:
    try:
        parse(text)
    except ValueError:
        return False
    return True


def _network(text: str) -> object:
    # Node podCIDRs as Go's net.ParseCIDR reads them: host bits allowed.
    return ipaddress.ip_network(text, strict=False)


def _node_addresses(
    status: Mapping[str, Any], label: str, rejections: list[Rejection]
) -> tuple[str, ...]:
    """The InternalIP and ExternalIP addresses; one that does not parse is dropped alone."""
    addresses: list[str] = []
    for index, item in enumerate(_list(status.get("addresses"), "status.addresses")):
        entry = _mapping(item, f"status.addresses[{index}]")
        if _str(entry.get("type"), "address type") in ("InternalIP", "ExternalIP"):
            text = _str(entry.get("address"), "address")
            if _parses(ipaddress.ip_address, text):
                addresses.append(text)
            else:
                rejections.append(
                    Rejection(
                        label,
                        f"status.addresses[{index}] {text!r} is not an IP address; ignored",
                    )
                )
    return tuple(addresses)


def parse_node(obj: Mapping[str, Any]) -> tuple[Node | None, list[Rejection]]:
    """The Node; an address or pod CIDR that does not parse is dropped alone, with a warning."""
    rejections: list[Rejection] = []
    try:
        key = object_key(obj, namespaced=False)
        label = f"Node {key.name}"
        metadata = _mapping(obj.get("metadata"), "metadata")
        spec = _mapping(obj.get("spec"), "spec")
        status = _mapping(obj.get("status"), "status")
        pod_cidrs = _str_tuple(spec.get("podCIDRs"), "spec.podCIDRs")
        if not pod_cidrs and spec.get("podCIDR"):
            pod_cidrs = (_str(spec.get("podCIDR"), "spec.podCIDR"),)
        for text in pod_cidrs:
            if not _parses(_network, text):
                rejections.append(
                    Rejection(label, f"spec.podCIDRs {text!r} is not a CIDR; ignored")
                )
        addresses = _node_addresses(status, label, rejections)
        taints = [
            _str(_mapping(item, f"spec.taints[{index}]").get("key"), "taint key")
            for index, item in enumerate(_list(spec.get("taints"), "spec.taints"))
        ]
        node = Node(
            name=key.name,
            addresses=addresses,
            labels=_str_map(metadata.get("labels"), "metadata.labels"),
            pod_cidrs=tuple(text for text in pod_cidrs if _parses(_network, text)),
            taints=tuple(taints),
            deleting=metadata.get("deletionTimestamp") is not None,
        )
    except ParseError as error:
        return None, [Rejection(describe({**obj, "kind": "Node"}), str(error))]
    return node, rejections


def parse_node_addresses(obj: Mapping[str, Any]) -> tuple[Node | None, list[Rejection]]:
    """Another node's Node, slim: its name and addresses, all a proxy needs of it (no Service
    may take them); at thousands of nodes each costs a few hundred bytes, not its whole JSON."""
    rejections: list[Rejection] = []
    try:
        key = object_key(obj, namespaced=False)
        status = _mapping(obj.get("status"), "status")
        addresses = _node_addresses(status, f"Node {key.name}", rejections)
    except ParseError as error:
        return None, [Rejection(describe({**obj, "kind": "Node"}), str(error))]
    # The name is the one its pods' endpoints carry: kept once for all of them.
    return Node(name=sys.intern(key.name), addresses=addresses, labels=_EMPTY), rejections


def parse_node_as_seen_by(
    obj: Mapping[str, Any], own: str | None
) -> tuple[Node | None, list[Rejection]]:
    """The Node: whole if it is the one called ``own`` (this node's), else slim."""
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return parse_node(obj) if name == own else parse_node_addresses(obj)


def node_parser(
    own: str | None,
) -> Callable[[Mapping[str, Any]], tuple[Node | None, list[Rejection]]]:
    """``parse_node_as_seen_by`` for the node called ``own``."""
    return partial(parse_node_as_seen_by, own=own)


def index_node_addresses(nodes: Iterable[Node]) -> Mapping[IPAddress, str]:
    """Each address of the Nodes with the Node that has it (the first by name, if several)."""
    found: dict[IPAddress, str] = {}
    for node in sorted(nodes, key=lambda node: node.name):
        for text in node.addresses:
            found.setdefault(ipaddress.ip_address(text), node.name)
    return MappingProxyType(found)


ParsedObject = Service | EndpointSlice | Node


def parse_object(obj: Any, node_name: str | None) -> tuple[ParsedObject | None, list[Rejection]]:
    """One manifest object as a snapshot keeps it, with its problems: Services,
    EndpointSlices and Nodes (the one called ``node_name`` whole, the others slim); other
    kinds give None."""
    if not isinstance(obj, Mapping):
        return None, [Rejection("object (unnamed)", "not an object")]
    kind = obj.get("kind")
    if kind == "Service":
        return parse_service(obj)
    if kind == "EndpointSlice":
        return parse_endpoint_slice(obj)
    if kind == "Node":
        return parse_node_as_seen_by(obj, node_name)
    return None, []


class SnapshotBuilder:
    """Objects added one at a time, each answered with its own rejections; then the snapshot.

    Other kinds than Service, EndpointSlice and Node are ignored. An object with the
    namespace/name of one added before replaces it (callers that can tell say so). Of Nodes
    other than ``node_name`` only the addresses are kept.
    """

    def __init__(self, node_name: str | None) -> None:
        self._node_name = node_name
        self._services: dict[ObjectKey, Service] = {}
        self._slices: dict[ObjectKey, EndpointSlice] = {}
        self._nodes: dict[str, Node] = {}

    def add(self, obj: Any) -> list[Rejection]:
        parsed, problems = parse_object(obj, self._node_name)
        if isinstance(parsed, Service):
            self._services[parsed.key] = parsed
        elif isinstance(parsed, EndpointSlice):
            self._slices[parsed.key] = parsed
        elif parsed is not None:
            self._nodes[parsed.name] = parsed
        return problems

    def forget_nodes(self) -> None:
        """The Nodes added so far are void (a list of them starts again)."""
        self._nodes.clear()

    def build(self) -> tuple[ClusterSnapshot, list[Rejection]]:
        rejections: list[Rejection] = []
        node = self._nodes.get(self._node_name) if self._node_name is not None else None
        if self._node_name is not None and node is None:
            rejections.append(Rejection(f"Node {self._node_name}", MISSING_NODE))
        snapshot = ClusterSnapshot(
            services=MappingProxyType(self._services),
            endpoint_slices=MappingProxyType(self._slices),
            node=node,
            nodes_by_address=index_node_addresses(self._nodes.values()),
        )
        return snapshot, rejections


@without_cyclic_gc
def snapshot_from_objects(
    objects: Iterable[Mapping[str, Any]], node_name: str | None
) -> tuple[ClusterSnapshot, list[Rejection]]:
    """Services, slices, the Node called ``node_name`` and every Node's addresses; other kinds
    are ignored."""
    builder = SnapshotBuilder(node_name)
    rejections = [rejection for obj in objects for rejection in builder.add(obj)]
    snapshot, more = builder.build()
    return snapshot, [*rejections, *more]
