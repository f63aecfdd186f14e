"""The proxy flags that change what translate produces."""

from __future__ import annotations

import enum
import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ipvsproxy import defaults
from ipvsproxy.model import IPAddress, IPNetwork

NODEPORT_PRIMARY = "primary"
# kube-apiserver's --service-node-port-range default.
DEFAULT_NODE_PORT_RANGE = (30000, 32767)
KUBELET_PORT = 10250
# The kubelet's, and kube-proxy's default health and metrics ports (--healthz-bind-address,
# --metrics-bind-address): the configuration replaces the last two with the ports it serves.
DEFAULT_OWN_PORTS = frozenset({KUBELET_PORT, defaults.HEALTHZ_BIND[1], defaults.METRICS_BIND[1]})
_PORT_NUMBER = re.compile(r"[0-9]{1,5}")


class LocalDetectMode(enum.StrEnum):
    """--detect-local-mode: how traffic from this node's pods is told from the rest."""

    CLUSTER_CIDR = "ClusterCIDR"
    NODE_CIDR = "NodeCIDR"
    BRIDGE_INTERFACE = "BridgeInterface"
    INTERFACE_NAME_PREFIX = "InterfaceNamePrefix"


@dataclass(frozen=True, slots=True)
class Settings:
    scheduler: str = defaults.SCHEDULER
    service_proxy_name: str = ""
    nodeport_addresses: tuple[IPNetwork, ...] = ()
    # --nodeport-addresses=primary: NodePorts only on the node's primary IP of each family.
    nodeport_primary: bool = False
    masquerade_all: bool = False
    masquerade_bit: int = defaults.MASQUERADE_BIT
    cluster_cidr: tuple[IPNetwork, ...] = ()
    detect_local_mode: LocalDetectMode = LocalDetectMode.CLUSTER_CIDR
    bridge_interface: str = ""
    interface_name_prefix: str = ""
    exclude_cidrs: tuple[IPNetwork, ...] = ()
    # --service-external-ip-range (kube-router's flag): when given, externalIPs outside these
    # are ignored, so a tenant cannot claim any address it likes (CVE-2020-8554).
    external_ip_ranges: tuple[IPNetwork, ...] = ()
    strict_arp: bool = False
    # --service-node-port-range (kube-apiserver's flag), inclusive: nodePorts and
    # healthCheckNodePorts outside it are refused, as the API server's allocator would.
    node_port_range: tuple[int, int] = DEFAULT_NODE_PORT_RANGE
    # Ports the node serves itself (the kubelet's, our health and metrics servers): a node
    # port there would hand them to a tenant's pods.
    own_ports: frozenset[int] = DEFAULT_OWN_PORTS
    # Used for NodePort when the snapshot has no Node (e.g. --hostname-override unknown).
    node_ips: tuple[IPAddress, ...] = ()


def parse_nodeport_addresses(values: Sequence[str]) -> tuple[tuple[IPNetwork, ...], bool]:
    """``--nodeport-addresses`` as kube-proxy reads it: (CIDRs, primary).

    Either CIDRs (host bits allowed, as Go's sloppy parser) or the single keyword
    ``primary``; raises ValueError with kube-proxy's message for anything else.
    """
    if NODEPORT_PRIMARY in values:
        if len(values) != 1:
            raise ValueError(f"{NODEPORT_PRIMARY!r}: can't use both 'primary' and CIDRs")
        return (), True
    networks: list[IPNetwork] = []
    for value in values:
        try:
            networks.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError:
            raise ValueError(f"{value!r}: must be a valid CIDR") from None
    return tuple(networks), False


def parse_port_range(text: str) -> tuple[int, int]:
    """A port range as kube-apiserver's --service-node-port-range takes it: ``LOW-HIGH``,
    ``BASE+OFFSET`` or one port, within 1-65535; raises ValueError saying what is wrong."""
    value = text.strip()
    low_text, sep, rest = value.partition("-") if "-" in value else value.partition("+")
    parts = [low_text, rest] if sep else [low_text]
    if not all(_PORT_NUMBER.fullmatch(part) for part in parts):
        raise ValueError("not a port range (LOW-HIGH, BASE+OFFSET or PORT)")
    low = int(low_text)
    high = low if not sep else int(rest) if sep == "-" else low + int(rest)
    if not 1 <= low <= 65535 or high > 65535:
        raise ValueError("ports are 1-65535")
    if high < low:
        raise ValueError("the end port may not be below the start port")
    return low, high
