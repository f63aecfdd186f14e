"""The differential lab's network: a fabric, two mirrored nodes, their pods and clients.

Inside one lab kernel the root namespace is the fabric: a bridge, the router between nodes,
and the way to the control plane (``tests.lab.controlplane`` puts its address on a link of the
root namespace). Each node is a network namespace with the same layout:

* ``eth0``, a veth on the fabric: the node's primary addresses, the ones its Node lists;
* ``eth1``, a dummy "second NIC" whose addresses the Node object does not list;
* ``eth2``, a veth to its own outside client, which routes everything through this node;
* one veth per pod, Calico style (a link-local gateway on the node side).

The nodes mirror each other: node-a's pods, client and host server have twins on node-b with
the same place in the layout. ``SWAP`` maps every value that names one node to its twin's, so
that what kube-proxy made on node-a and what we made on node-b compare as equals.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

from ipvsproxy.model import IPNetwork
from tests.lab.netns import inside, ip_batch, sysctl

FABRIC = "fab0"
FABRIC_IPV4 = "10.250.0.1"
FABRIC_IPV6 = "fd00:250::1"
# The outside client of each node: the same addresses on each node's own link.
CLIENT_LINK_NODE_IPV4 = "10.252.0.1"
CLIENT_LINK_NODE_IPV6 = "fd00:252::1"
CLIENT_IPV4 = "10.252.0.2"
CLIENT_IPV6 = "fd00:252::2"
POD_GATEWAY_IPV4 = "169.254.1.1"
POD_GATEWAY_IPV6 = "fe80::1"
POD_PORT = 8080
# A server on each node itself (a "host port"), which must not answer on service addresses.
HOST_PORT = 9999


@dataclass(frozen=True)
class NodeLayout:
    """One node's addresses, by its index (node-a is 1, node-b 2, node-c 3)."""

    name: str
    index: int

    @property
    def namespace(self) -> str:
        return self.name

    @property
    def ipv4(self) -> str:
        return f"10.250.0.{10 + self.index}"

    @property
    def ipv6(self) -> str:
        return f"fd00:250::{10 + self.index}"

    @property
    def secondary_ipv4(self) -> str:
        return f"10.251.0.{10 + self.index}"

    @property
    def secondary_ipv6(self) -> str:
        return f"fd00:251::{10 + self.index}"

    @property
    def pod_cidr_ipv4(self) -> str:
        return f"10.244.{self.index}.0/24"

    @property
    def pod_cidr_ipv6(self) -> str:
        return f"fd00:10:244:{self.index}::/64"

    @property
    def client_namespace(self) -> str:
        return f"client-{self.name}"

    def interface_addresses(self) -> tuple[str, ...]:
        """Every address on the node's interfaces (kube-ipvs0's and link-local IPv6 aside)."""
        return (
            self.ipv4,
            self.ipv6,
            self.secondary_ipv4,
            self.secondary_ipv6,
            CLIENT_LINK_NODE_IPV4,
            CLIENT_LINK_NODE_IPV6,
            POD_GATEWAY_IPV4,
        )

    def pod_ipv4(self, number: int) -> str:
        return f"10.244.{self.index}.{10 + number}"

    def pod_ipv6(self, number: int) -> str:
        return f"fd00:10:244:{self.index}::{10 + number:x}"

    def pod_name(self, number: int) -> str:
        """A pod's name, as it answers requests: ``a1`` is node-a's first pod."""
        return f"{self.name[-1]}{number}"

    def pod_namespace(self, number: int) -> str:
        return f"pod-{self.pod_name(number)}"

    def node_object(self, zone: str = "zone-1") -> dict[str, object]:
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": {
                    "kubernetes.io/hostname": self.name,
                    "topology.kubernetes.io/zone": zone,
                },
            },
            "spec": {"podCIDRs": [self.pod_cidr_ipv4, self.pod_cidr_ipv6]},
            "status": {
                "addresses": [
                    {"type": "InternalIP", "address": self.ipv4},
                    {"type": "InternalIP", "address": self.ipv6},
                    {"type": "Hostname", "address": self.name},
                ]
            },
        }


NODE_A = NodeLayout("node-a", 1)  # the real kube-proxy's
NODE_B = NodeLayout("node-b", 2)  # ours
NODE_C = NodeLayout("node-c", 3)  # an API object only: endpoints remote to both
# Pods per proxied node that serve traffic (their twins on the other node).
PODS_PER_NODE = 2


@dataclass(frozen=True)
class Swap:
    """The bijection between node-a's and node-b's values: addresses, networks, pod names."""

    addresses: Mapping[str, str]
    # (network of node-a, network of node-b): addresses inside map by their offset.
    networks: tuple[tuple[str, str], ...]

    @cached_property
    def _pairs(self) -> list[tuple[IPNetwork, IPNetwork]]:
        pairs = [(ipaddress.ip_network(a), ipaddress.ip_network(b)) for a, b in self.networks]
        return pairs + [(b, a) for a, b in pairs]

    @cached_property
    def _both_ways(self) -> dict[str, str]:
        both = {
            str(ipaddress.ip_address(a)): str(ipaddress.ip_address(b))
            for a, b in self.addresses.items()
        }
        return {**both, **{b: a for a, b in both.items()}}

    def address(self, text: str) -> str:
        """The twin of an address (or of a network, ``ADDRESS/PREFIX``); others unchanged."""
        host, slash, prefix = text.partition("/")
        try:
            parsed = ipaddress.ip_address(host)
        except ValueError:
            return text
        mapped = self._both_ways.get(str(parsed))
        if mapped is None:
            for mine, theirs in self._pairs:
                if parsed in mine and (not slash or int(prefix) >= mine.prefixlen):
                    offset = int(parsed) - int(mine.network_address)
                    mapped = str(ipaddress.ip_address(int(theirs.network_address) + offset))
                    break
        return f"{mapped or parsed}{slash}{prefix}"


def _swap() -> Swap:
    a, b = NODE_A, NODE_B
    return Swap(
        addresses={
            a.ipv4: b.ipv4,
            a.ipv6: b.ipv6,
            a.secondary_ipv4: b.secondary_ipv4,
            a.secondary_ipv6: b.secondary_ipv6,
        },
        networks=(
            (a.pod_cidr_ipv4, b.pod_cidr_ipv4),
            (a.pod_cidr_ipv6, b.pod_cidr_ipv6),
        ),
    )


SWAP = _swap()


def set_up_fabric() -> None:
    ip_batch(
        [
            f"link add {FABRIC} type bridge",
            f"link set {FABRIC} up",
            f"addr add {FABRIC_IPV4}/24 dev {FABRIC}",
            f"addr add {FABRIC_IPV6}/64 dev {FABRIC} nodad",
        ]
    )
    sysctl("net.ipv4.ip_forward", "1")
    sysctl("net.ipv6.conf.all.forwarding", "1")


def set_up_node(node: NodeLayout) -> None:
    """The node's namespace, NICs, client and pods (a namespace left from before is replaced)."""
    ns, fabric_side = node.namespace, f"f-{node.name}"
    client = node.client_namespace
    ip_batch(
        [
            f"netns add {ns}",
            f"netns add {client}",
            f"link add {fabric_side} type veth peer name eth0 netns {ns}",
            f"link set {fabric_side} master {FABRIC}",
            f"link set {fabric_side} up",
            f"route replace {node.pod_cidr_ipv4} via {node.ipv4}",
            f"route replace {node.pod_cidr_ipv6} via {node.ipv6}",
            f"route replace {node.secondary_ipv4}/32 via {node.ipv4}",
            f"route replace {node.secondary_ipv6}/128 via {node.ipv6}",
        ]
    )
    ip_batch(
        [
            "link set lo up",
            f"addr add {node.ipv4}/24 dev eth0",
            f"addr add {node.ipv6}/64 dev eth0 nodad",
            "link set eth0 up",
            f"route add default via {FABRIC_IPV4}",
            f"route add default via {FABRIC_IPV6}",
            "link add eth1 type dummy",
            f"addr add {node.secondary_ipv4}/24 dev eth1",
            f"addr add {node.secondary_ipv6}/64 dev eth1 nodad",
            "link set eth1 up",
            f"link add eth2 type veth peer name eth0 netns {client}",
            f"addr add {CLIENT_LINK_NODE_IPV4}/24 dev eth2",
            f"addr add {CLIENT_LINK_NODE_IPV6}/64 dev eth2 nodad",
            "link set eth2 up",
        ],
        namespace=ns,
    )
    with inside(ns):
        sysctl("net.ipv4.ip_forward", "1")
        sysctl("net.ipv6.conf.all.forwarding", "1")
    ip_batch(
        [
            "link set lo up",
            f"addr add {CLIENT_IPV4}/24 dev eth0",
            f"addr add {CLIENT_IPV6}/64 dev eth0 nodad",
            "link set eth0 up",
            f"route add default via {CLIENT_LINK_NODE_IPV4}",
            f"route add default via {CLIENT_LINK_NODE_IPV6}",
        ],
        namespace=client,
    )
    for number in range(1, PODS_PER_NODE + 1):
        _set_up_pod(node, number)


def _set_up_pod(node: NodeLayout, number: int) -> None:
    pod, veth = node.pod_namespace(number), f"veth{number}"
    ipv4, ipv6 = node.pod_ipv4(number), node.pod_ipv6(number)
    ip_batch([f"netns add {pod}"])
    ip_batch(
        [
            f"link add {veth} type veth peer name eth0 netns {pod}",
            f"addr add {POD_GATEWAY_IPV4}/32 dev {veth}",
            f"addr add {POD_GATEWAY_IPV6}/64 dev {veth} nodad",
            f"link set {veth} up",
            f"route add {ipv4}/32 dev {veth}",
            f"route add {ipv6}/128 dev {veth}",
        ],
        namespace=node.namespace,
    )
    ip_batch(
        [
            "link set lo up",
            f"addr add {ipv4}/32 dev eth0",
            f"addr add {ipv6}/128 dev eth0 nodad",
            "link set eth0 up",
            f"route add {POD_GATEWAY_IPV4} dev eth0 scope link",
            f"route add 0.0.0.0/0 via {POD_GATEWAY_IPV4} dev eth0",
            f"route add ::/0 via {POD_GATEWAY_IPV6} dev eth0",
        ],
        namespace=pod,
    )


def tear_down_node(node: NodeLayout) -> None:
    """Every namespace of the node, and its link on the fabric (routes go with it)."""
    pods = [f"netns del {node.pod_namespace(n)}" for n in range(1, PODS_PER_NODE + 1)]
    ip_batch(
        [
            f"link del f-{node.name}",
            f"netns del {node.namespace}",
            f"netns del {node.client_namespace}",
            *pods,
        ]
    )
