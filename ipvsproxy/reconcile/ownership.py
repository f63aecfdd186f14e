"""Which of the kernel's virtual servers a service proxy made, told from the kernel alone.

kube-proxy's IPVS mode and ipvsproxy keep the same records under the same names, so the
kernel itself says which virtual servers are a service proxy's, whichever of the two made
them:

* one on an address bound on kube-ipvs0 (a service address);
* one whose address, protocol and port are in a service-address ipset (KUBE-CLUSTER-IP,
  KUBE-EXTERNAL-IP and its -LOCAL twin, KUBE-LOAD-BALANCER), kube-ipvs0 or not: an external
  or load-balancer IP that is the node's own address is never bound there;
* one on one of the node's own addresses whose protocol and port are in a NodePort ipset
  (bitmap:port for TCP and UDP, ``address,sctp:port`` for SCTP).

Everything else in the table (another load balancer's, a keepalived's, an operator's own)
is not a service proxy's. ``cleanup`` removes exactly these; a full sync counts them as its
own beside what the desired state names, so on a node that kube-proxy programmed, what
kube-proxy made and the cluster no longer wants goes, and nothing else is touched.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ipvsproxy.model import (
    IPAddress,
    IPFamily,
    IPSetContent,
    TransportProtocol,
    VirtualServerKey,
)
from ipvsproxy.names import set_name

# NodePort sets by protocol. TCP and UDP sets are bitmap:port ("30080"); SCTP's are
# hash:ip,port ("192.168.10.11,sctp:30080").
NODE_PORT_SETS: Mapping[TransportProtocol, tuple[str, ...]] = {
    TransportProtocol.TCP: ("KUBE-NODE-PORT-TCP", "KUBE-NODE-PORT-LOCAL-TCP"),
    TransportProtocol.UDP: ("KUBE-NODE-PORT-UDP", "KUBE-NODE-PORT-LOCAL-UDP"),
    TransportProtocol.SCTP: ("KUBE-NODE-PORT-SCTP-HASH", "KUBE-NODE-PORT-LOCAL-SCTP-HASH"),
}

# Sets of "address,protocol:port" entries, one per service address's virtual server.
SERVICE_ADDRESS_SETS = (
    "KUBE-CLUSTER-IP",
    "KUBE-EXTERNAL-IP",
    "KUBE-EXTERNAL-IP-LOCAL",
    "KUBE-LOAD-BALANCER",
)

IPSets = Mapping[str, IPSetContent]


def _ip_port(key: VirtualServerKey) -> str:
    return f"{key.address},{key.protocol.value.lower()}:{key.port}"


def _in_sets(entry: str, bases: Iterable[str], key: VirtualServerKey, sets: IPSets) -> bool:
    names = (set_name(base, IPFamily.of(key.address)) for base in bases)
    return any(entry in sets[name].entries for name in names if name in sets)


def _is_node_port(key: VirtualServerKey, sets: IPSets) -> bool:
    entry = _ip_port(key) if key.protocol is TransportProtocol.SCTP else str(key.port)
    return _in_sets(entry, NODE_PORT_SETS[key.protocol], key, sets)


def made_by_a_proxy(
    key: VirtualServerKey,
    *,
    dummy_addresses: frozenset[IPAddress],
    node_addresses: frozenset[IPAddress],
    ipsets: IPSets,
) -> bool:
    """Whether the kernel's own records say a service proxy made this virtual server."""
    if key.address in dummy_addresses:
        return True
    if _in_sets(_ip_port(key), SERVICE_ADDRESS_SETS, key, ipsets):
        return True
    return key.address in node_addresses and _is_node_port(key, ipsets)
