"""What translate needs to know of this node, worked out once per translate, and of the others."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ipvsproxy.model import ClusterSnapshot, IPAddress, IPFamily, IPNetwork
from ipvsproxy.translate.settings import Settings


@dataclass(frozen=True, slots=True)
class NodeFacts:
    name: str | None
    zone: str | None
    # Every address of the node: an external or load-balancer IP among them is not bound.
    addresses: frozenset[IPAddress]
    # The addresses that carry NodePort virtual servers (--nodeport-addresses applied).
    node_port_addresses: tuple[IPAddress, ...]
    # kube-proxy's per-family node IP: whether a source range lets the node reach an LB IP.
    primary: Mapping[IPFamily, IPAddress]
    pod_cidrs: tuple[IPNetwork, ...]


def node_facts(snapshot: ClusterSnapshot, settings: Settings) -> NodeFacts:
    raw: list[IPAddress] = []
    if snapshot.node is not None:
        for text in snapshot.node.addresses:
            try:
                raw.append(ipaddress.ip_address(text))
            except ValueError:
                continue
    if not raw:
        raw = list(settings.node_ips)
    primary: dict[IPFamily, IPAddress] = {}
    for address in raw:
        primary.setdefault(IPFamily.of(address), address)
    # As kube-proxy's node address listing: never loopback, never IPv6 link-local.
    usable = [a for a in raw if not a.is_loopback and not (a.version == 6 and a.is_link_local)]
    if settings.nodeport_primary:
        usable = [a for a in usable if a in primary.values()]
    elif settings.nodeport_addresses:
        usable = [a for a in usable if any(a in net for net in settings.nodeport_addresses)]
    return NodeFacts(
        name=snapshot.node.name if snapshot.node is not None else None,
        zone=snapshot.node.zone if snapshot.node is not None else None,
        addresses=frozenset(raw),
        node_port_addresses=tuple(dict.fromkeys(usable)),
        primary=MappingProxyType(primary),
        pod_cidrs=_networks(snapshot.node.pod_cidrs if snapshot.node is not None else ()),
    )


def _networks(texts: tuple[str, ...]) -> tuple[IPNetwork, ...]:
    networks: list[IPNetwork] = []
    for text in texts:
        try:
            networks.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            continue
    return tuple(networks)


def address_owner(
    address: IPAddress, node: NodeFacts, nodes_by_address: Mapping[IPAddress, str]
) -> str | None:
    """Whose address ``address`` is ("this node's", "Node NAME's"), or None: nobody's.

    This node's addresses include the ones NodePorts use (``--nodeport-addresses``), which a
    user-written address must never take over.
    """
    if address in node.addresses or address in node.node_port_addresses:
        return "this node's"
    name = nodes_by_address.get(address)
    return None if name is None else f"Node {name}'s"


def moved_addresses(
    before: Mapping[IPAddress, str], after: Mapping[IPAddress, str]
) -> frozenset[IPAddress]:
    """The addresses that came, went or passed to another Node between two readings."""
    if before is after:
        return frozenset()
    return frozenset(a for a in before.keys() | after.keys() if before.get(a) != after.get(a))
