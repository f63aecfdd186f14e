"""kube-proxy's IPVS-mode ipsets, filled from the virtual servers translate chose.

Names, types, comments and contents are kube-proxy's (pkg/proxy/ipvs), so dashboards and
runbooks keep working. IPv6 sets carry the ``KUBE-6-`` prefix, cut to ipset's 31-character
limit, as kube-proxy's do. Entries are written exactly as ``ipset list`` prints them
(``10.96.0.10,tcp:80``, host nets without ``/32``, IPv6 compressed), so a read-back compares
equal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from ipaddress import ip_address

from ipvsproxy.model import (
    AddressKind,
    DesiredVirtualServer,
    IPAddress,
    IPFamily,
    IPNetwork,
    IPSetSpec,
    RealServerKey,
    TransportProtocol,
    VirtualServerKey,
)
from ipvsproxy.names import SETS, set_name


@dataclass(frozen=True, slots=True)
class Firewall:
    """loadBalancerSourceRanges of one load-balancer virtual server, for the firewall sets.

    ``allow_from_node``: the node's own address is inside a range, so traffic the node sends
    to the load balancer IP (which IPVS sees with the LB IP as source) is let through.
    """

    source_ranges: tuple[IPNetwork, ...]
    allow_from_node: bool


def set_entry(address: IPAddress | IPNetwork) -> str:
    """An address or net as ``ipset list`` prints it: host nets without their prefix."""
    if isinstance(address, IPAddress):
        return str(address)
    if address.prefixlen == address.max_prefixlen:
        return str(address.network_address)
    return str(address)


# Every translation formats every entry again; an address costs microseconds to print, so the
# daemon, translating often, keeps the texts.
@lru_cache(maxsize=1 << 18)
def ip_port(key: VirtualServerKey) -> str:
    return f"{key.address},{key.protocol.value.lower()}:{key.port}"


def _members(
    key: VirtualServerKey, desired: DesiredVirtualServer, local: bool
) -> list[tuple[str, str]]:
    """(set, entry) pairs for one virtual server, as kube-proxy's syncProxyRules adds them."""
    entry = ip_port(key)
    if desired.kind is AddressKind.CLUSTER_IP:
        return [("KUBE-CLUSTER-IP", entry)]
    if desired.kind is AddressKind.EXTERNAL_IP:
        # Local external IPs are not masqueraded, so they go to the -LOCAL set only.
        return [("KUBE-EXTERNAL-IP-LOCAL" if local else "KUBE-EXTERNAL-IP", entry)]
    if desired.kind is AddressKind.LOAD_BALANCER:
        return [("KUBE-LOAD-BALANCER", entry)] + (
            [("KUBE-LOAD-BALANCER-LOCAL", entry)] if local else []
        )
    if key.protocol is TransportProtocol.SCTP:
        names = ["KUBE-NODE-PORT-SCTP-HASH"] + (["KUBE-NODE-PORT-LOCAL-SCTP-HASH"] if local else [])
        return [(name, entry) for name in names]
    suffix = key.protocol.value
    names = [f"KUBE-NODE-PORT-{suffix}"] + ([f"KUBE-NODE-PORT-LOCAL-{suffix}"] if local else [])
    return [(name, str(key.port)) for name in names]


@lru_cache(maxsize=1 << 18)
def _hairpin_entry(protocol: TransportProtocol, real: RealServerKey) -> str:
    return f"{real.address},{protocol.value.lower()}:{real.port},{real.address}"


def _firewall_members(key: VirtualServerKey, firewall: Firewall) -> list[tuple[str, str]]:
    entry = ip_port(key)
    members = [("KUBE-LOAD-BALANCER-FW", entry)]
    members += [
        ("KUBE-LOAD-BALANCER-SOURCE-CIDR", f"{entry},{set_entry(net)}")
        for net in firewall.source_ranges
    ]
    if firewall.allow_from_node:
        members.append(("KUBE-LOAD-BALANCER-SOURCE-IP", f"{entry},{key.address}"))
    return members


# Every set of both families, in kube-proxy's order: kube-proxy creates them all, empty or not.
SPECS: Mapping[str, IPSetSpec] = {
    set_name(base, family): IPSetSpec(set_name(base, family), set_type, family, comment)
    for base, (set_type, comment) in SETS.items()
    for family in IPFamily
}

Member = tuple[str, str]  # (set name, entry)


def virtual_server_members(
    key: VirtualServerKey, desired: DesiredVirtualServer, local: bool, firewall: Firewall | None
) -> list[Member]:
    """What one winning virtual server puts in the sets (its bound address aside)."""
    members = _members(key, desired, local)
    if firewall is not None:
        members += _firewall_members(key, firewall)
    family = IPFamily.of(key.address)
    return [(set_name(base, family), entry) for base, entry in members]


# The sets whose entries begin with the virtual server they are for (``ip_port``).
_LED_BY_VIRTUAL_SERVER = frozenset(
    set_name(base, family)
    for base, (set_type, _) in SETS.items()
    if set_type.startswith("hash:ip,port") and base != "KUBE-LOOP-BACK"
    for family in IPFamily
)
_PROTOCOLS = {protocol.value.lower(): protocol for protocol in TransportProtocol}


def virtual_server_of_member(name: str, entry: str) -> VirtualServerKey | None:
    """The virtual server an entry of set ``name`` is for, where the entry names it."""
    if name not in _LED_BY_VIRTUAL_SERVER:
        return None
    address, _, rest = entry.partition(",")
    protocol, _, port = rest.partition(",")[0].partition(":")
    try:
        return VirtualServerKey(_PROTOCOLS[protocol], ip_address(address), int(port))
    except (KeyError, ValueError):
        return None


def hairpin_member(protocol: TransportProtocol, real: RealServerKey) -> Member:
    return set_name("KUBE-LOOP-BACK", IPFamily.of(real.address)), _hairpin_entry(protocol, real)


def health_check_member(family: IPFamily, port: int) -> Member:
    return set_name("KUBE-HEALTH-CHECK-NODE-PORT", family), str(port)


def bound_address_member(address: IPAddress) -> Member:
    return set_name("KUBE-IPVS-IPS", IPFamily.of(address)), str(address)
