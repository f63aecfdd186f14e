"""The proxy flags that change what translate produces."""

from __future__ import annotations

from dataclasses import dataclass

from ipvsproxy.model import IPAddress, IPNetwork


@dataclass(frozen=True, slots=True)
class Settings:
    scheduler: str = "rr"
    service_proxy_name: str = ""
    nodeport_addresses: tuple[IPNetwork, ...] = ()
    masquerade_all: bool = False
    cluster_cidr: tuple[IPNetwork, ...] = ()
    exclude_cidrs: tuple[IPNetwork, ...] = ()
    strict_arp: bool = False
    # Used for NodePort when the snapshot has no Node (e.g. --hostname-override unknown).
    node_ips: tuple[IPAddress, ...] = ()
