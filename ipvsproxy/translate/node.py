"""What translate needs to know of this node, worked out once per translate, and of the others.

As kube-proxy's IPVS proxier: the node's own addresses are its interfaces' (kube-ipvs0's
aside), read from the kernel, so an address on a second NIC that the Node object does not
list still carries NodePorts and is never bound again on kube-ipvs0; the Node object gives the
primary address of each family (may the node reach a load balancer through its source
ranges) and the `primary` of --nodeport-addresses. Without a kernel reading (a plan against no
kernel), the Node object's addresses stand in for the interfaces'.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
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


def _parsed(texts: Iterable[str]) -> list[IPAddress]:
    found: list[IPAddress] = []
    for text in texts:
        try:
            found.append(ipaddress.ip_address(text))
        except ValueError:
            continue
    return found


def _node_port_candidate(address: IPAddress) -> bool:
    """kube-proxy's node address listing: never loopback, never IPv6 link-local."""
    return not address.is_loopback and not (address.version == 6 and address.is_link_local)


def node_port_addresses(
    local: Iterable[IPAddress], primary: Mapping[IPFamily, IPAddress], settings: Settings
) -> tuple[IPAddress, ...]:
    """The node's addresses that carry NodePorts, in a stable order, as kube-proxy picks them
    for each family: those inside the family's --nodeport-addresses CIDRs (``primary``: the
    Node's primary address of the family, where the node really has it), and all of them
    when the flag names none of the family (kube-proxy warns, then serves them all)."""
    chosen = []
    for address in local:
        if not _node_port_candidate(address):
            continue
        family = IPFamily.of(address)
        if settings.nodeport_primary:
            keep = family not in primary or address == primary[family]
        else:
            nets = [net for net in settings.nodeport_addresses if IPFamily.of(net) is family]
            keep = not nets or any(address in net for net in nets)
        if keep:
            chosen.append(address)
    return tuple(sorted(set(chosen), key=lambda a: (a.version, int(a))))


def node_facts(snapshot: ClusterSnapshot, settings: Settings) -> NodeFacts:
    listed = _parsed(snapshot.node.addresses) if snapshot.node is not None else []
    if not listed:
        listed = list(settings.node_ips)
    primary: dict[IPFamily, IPAddress] = {}
    for address in listed:
        primary.setdefault(IPFamily.of(address), address)
    local = listed if snapshot.local_addresses is None else list(snapshot.local_addresses)
    return NodeFacts(
        name=snapshot.node.name if snapshot.node is not None else None,
        zone=snapshot.node.zone if snapshot.node is not None else None,
        addresses=frozenset(local),
        node_port_addresses=node_port_addresses(local, primary, settings),
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
