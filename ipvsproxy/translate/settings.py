"""The proxy flags that change what translate produces."""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from ipvsproxy.model import IPAddress, IPNetwork

NODEPORT_PRIMARY = "primary"


class LocalDetectMode(enum.StrEnum):
    """--detect-local-mode: how traffic from this node's pods is told from the rest."""

    CLUSTER_CIDR = "ClusterCIDR"
    NODE_CIDR = "NodeCIDR"
    BRIDGE_INTERFACE = "BridgeInterface"
    INTERFACE_NAME_PREFIX = "InterfaceNamePrefix"


@dataclass(frozen=True, slots=True)
class Settings:
    scheduler: str = "rr"
    service_proxy_name: str = ""
    nodeport_addresses: tuple[IPNetwork, ...] = ()
    # --nodeport-addresses=primary: NodePorts only on the node's primary IP of each family.
    nodeport_primary: bool = False
    masquerade_all: bool = False
    cluster_cidr: tuple[IPNetwork, ...] = ()
    detect_local_mode: LocalDetectMode = LocalDetectMode.CLUSTER_CIDR
    bridge_interface: str = ""
    interface_name_prefix: str = ""
    exclude_cidrs: tuple[IPNetwork, ...] = ()
    # --service-external-ip-range (kube-router's flag): when given, externalIPs outside these
    # are ignored, so a tenant cannot claim any address it likes (CVE-2020-8554).
    external_ip_ranges: tuple[IPNetwork, ...] = ()
    strict_arp: bool = False
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
