"""kube-proxy's IPVS-mode ipsets, filled from the virtual servers translate chose.

Names, types and comments are kube-proxy's, so dashboards and runbooks keep working;
IPv6 sets carry the ``KUBE-6-`` prefix as kube-proxy's do.
"""

from __future__ import annotations

from collections.abc import Mapping

from ipvsproxy.model import (
    AddressKind,
    DesiredVirtualServer,
    IPFamily,
    IPSetContent,
    IPSetSpec,
    Protocol,
    VirtualServerKey,
)

# name -> (type, comment)
SETS: Mapping[str, tuple[str, str]] = {
    "KUBE-CLUSTER-IP": (
        "hash:ip,port",
        "Kubernetes service cluster ip + port for masquerade purpose",
    ),
    "KUBE-LOOP-BACK": (
        "hash:ip,port,ip",
        "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose",
    ),
    "KUBE-EXTERNAL-IP": (
        "hash:ip,port",
        "Kubernetes service external ip + port for masquerade and filter purpose",
    ),
    "KUBE-EXTERNAL-IP-LOCAL": (
        "hash:ip,port",
        "Kubernetes service external ip + port with externalTrafficPolicy=local",
    ),
    "KUBE-LOAD-BALANCER": ("hash:ip,port", "Kubernetes service lb portal"),
    "KUBE-LOAD-BALANCER-LOCAL": (
        "hash:ip,port",
        "Kubernetes service load balancer ip + port with externalTrafficPolicy=local",
    ),
    "KUBE-NODE-PORT-TCP": ("bitmap:port", "Kubernetes nodeport TCP port for masquerade purpose"),
    "KUBE-NODE-PORT-LOCAL-TCP": (
        "bitmap:port",
        "Kubernetes nodeport TCP port with externalTrafficPolicy=local",
    ),
    "KUBE-NODE-PORT-UDP": ("bitmap:port", "Kubernetes nodeport UDP port for masquerade purpose"),
    "KUBE-NODE-PORT-LOCAL-UDP": (
        "bitmap:port",
        "Kubernetes nodeport UDP port with externalTrafficPolicy=local",
    ),
    "KUBE-NODE-PORT-SCTP-HASH": (
        "hash:ip,port",
        "Kubernetes nodeport SCTP port for masquerade purpose with type 'hash ip:port'",
    ),
    "KUBE-NODE-PORT-LOCAL-SCTP-HASH": (
        "hash:ip,port",
        "Kubernetes nodeport SCTP port with externalTrafficPolicy=local with type 'hash ip:port'",
    ),
    "KUBE-HEALTH-CHECK-NODE-PORT": ("bitmap:port", "Kubernetes health check node port"),
}

_ADDRESS_SETS = {
    AddressKind.CLUSTER_IP: "KUBE-CLUSTER-IP",
    AddressKind.EXTERNAL_IP: "KUBE-EXTERNAL-IP",
    AddressKind.LOAD_BALANCER: "KUBE-LOAD-BALANCER",
}


def set_name(base: str, family: IPFamily) -> str:
    """kube-proxy's name, cut to the 31 characters the kernel takes as kube-proxy cuts it."""
    return base if family is IPFamily.IPV4 else base.replace("KUBE-", "KUBE-6-", 1)[:31]


def _ip_port(key: VirtualServerKey) -> str:
    return f"{key.address},{key.protocol.value.lower()}:{key.port}"


def _members(key: VirtualServerKey, desired: DesiredVirtualServer, local: bool) -> list[str]:
    if desired.kind in _ADDRESS_SETS:
        base = _ADDRESS_SETS[desired.kind]
        names = [base]
        if local and desired.kind is not AddressKind.CLUSTER_IP:
            names.append(f"{base}-LOCAL")
        return [f"{name}={_ip_port(key)}" for name in names]
    if key.protocol is Protocol.SCTP:
        names = ["KUBE-NODE-PORT-SCTP-HASH"] + (["KUBE-NODE-PORT-LOCAL-SCTP-HASH"] if local else [])
        return [f"{name}={_ip_port(key)}" for name in names]
    suffix = key.protocol.value
    names = [f"KUBE-NODE-PORT-{suffix}"] + ([f"KUBE-NODE-PORT-LOCAL-{suffix}"] if local else [])
    return [f"{name}={key.port}" for name in names]


def build_ipsets(
    virtual_servers: Mapping[VirtualServerKey, DesiredVirtualServer],
    local_external: frozenset[VirtualServerKey],
    local_endpoints: Mapping[VirtualServerKey, frozenset[str]],
    health_check_ports: frozenset[int],
) -> dict[str, IPSetContent]:
    """Every set for both families, empty ones included: kube-proxy creates them all."""
    entries: dict[str, set[str]] = {
        set_name(base, family): set() for base in SETS for family in IPFamily
    }
    for key, desired in virtual_servers.items():
        family = IPFamily.of(key.address)
        for member in _members(key, desired, key in local_external):
            base, entry = member.split("=", 1)
            entries[set_name(base, family)].add(entry)
        for real in local_endpoints.get(key, frozenset()):
            address, port = real.rsplit(":", 1)
            address = address.strip("[]")
            entries[set_name("KUBE-LOOP-BACK", family)].add(
                f"{address},{key.protocol.value.lower()}:{port},{address}"
            )
    entries["KUBE-HEALTH-CHECK-NODE-PORT"] |= {str(port) for port in health_check_ports}
    result: dict[str, IPSetContent] = {}
    for base, (set_type, comment) in SETS.items():
        for family in IPFamily:
            name = set_name(base, family)
            result[name] = IPSetContent(
                IPSetSpec(name, set_type, family, comment), frozenset(entries[name])
            )
    return result
