"""The differences we make on purpose: each is in docs/kube-proxy-differences.md under its
name, with what kube-proxy does, what we do, why ours is better and the test that pins it.

A difference that none of these explains fails the run. Each explanation is narrow: it
names the services it concerns by what they are (their spec), never by a scenario's name,
so the random steps are held to the same rules as the named scenarios.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ipvsproxy.address_rules import unusable_reason
from tests.differential.normalise import Difference
from tests.differential.topology import NodeLayout

JsonObject = dict[str, Any]
SCHEDULER_ANNOTATION = "ipvsproxy.io/scheduler"
_ADDRESS = re.compile(r"(\d{1,3}(?:\.\d{1,3}){3}|[0-9a-f]*:[0-9a-f:]*:[0-9a-f]*)")


@dataclass(frozen=True)
class Context:
    """What an explanation may know beyond the difference: the services as the API server
    last showed them, and whether kube-proxy's node has NodePort addresses in each family
    (4, 6) under the profile."""

    services: Mapping[str, JsonObject]
    node_port_addresses: Mapping[int, bool]
    # Every address of kube-proxy's node and every address a Node object lists.
    node_addresses: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Explanation:
    name: str  # its heading in docs/kube-proxy-differences.md
    applies: Callable[[Difference, tuple[str, ...], Context], bool]


def _spec(context: Context, name: str) -> JsonObject:
    spec: JsonObject = context.services.get(name, {}).get("spec", {})
    return spec


def _annotated_scheduler(difference: Difference, owners: tuple[str, ...], context: Context) -> bool:
    """The virtual server's own line, its scheduler alone differing, for an annotated service."""
    if difference.section != "ipvs" or difference.subject.endswith("real servers") or not owners:
        return False
    annotated = all(
        SCHEDULER_ANNOTATION
        in context.services.get(o, {}).get("metadata", {}).get("annotations", {})
        for o in owners
    )
    schedulerless = [
        re.sub(r"-s \S+", "", side) for side in (difference.kube_proxy, difference.ours)
    ]
    return annotated and schedulerless[0] == schedulerless[1]


def _only_kube_proxys(difference: Difference) -> str | None:
    """What only kube-proxy holds, when we hold nothing of it."""
    if difference.ours in ("(none)", "(none) (only here)"):
        return difference.kube_proxy
    return None


def _addresses_only_kube_proxy_holds(difference: Difference) -> list[str] | None:
    """The address of each thing only kube-proxy holds (a virtual server, a set member, an
    address on kube-ipvs0), when we hold none of them; else None."""
    theirs = _only_kube_proxys(difference)
    if theirs is None or difference.section not in ("ipvs", "ipset", "kube-ipvs0"):
        return None
    if difference.section == "ipvs":
        return _ADDRESS.findall(difference.subject.split(" ", 1)[-1]) or None
    entries = [e for e in theirs.replace(" (only here)", "").split("; ") if e]
    found = [_ADDRESS.findall(entry)[:1] for entry in entries]
    return [f[0] for f in found] if found and all(found) else None


def _unusable_address(difference: Difference, owners: tuple[str, ...], context: Context) -> bool:
    """kube-proxy programs an address we refuse to bind anywhere (link-local and the like)."""
    found = _addresses_only_kube_proxy_holds(difference)
    return found is not None and all(_refused(address) for address in found)


def _refused(text: str) -> bool:
    try:
        return unusable_reason(ipaddress.ip_address(text)) is not None
    except ValueError:
        return False


def _user_written(context: Context, owners: tuple[str, ...]) -> set[str]:
    """The addresses the owners' users wrote: external IPs and load-balancer ingress IPs."""
    found: set[str] = set()
    for owner in owners:
        service = context.services.get(owner, {})
        found.update(service.get("spec", {}).get("externalIPs", []))
        ingress = service.get("status", {}).get("loadBalancer", {}).get("ingress", [])
        found.update(i["ip"] for i in ingress if "ip" in i)
    return {str(ipaddress.ip_address(a)) for a in found}


# Sets whose members are never a user-written address.
_ALLOCATED_SETS = re.compile(r"KUBE-(6-)?(CLUSTER-IP|NODE-PORT|LOOP-BACK|HEALTH-CHECK)")


def _node_address(difference: Difference, owners: tuple[str, ...], context: Context) -> bool:
    """kube-proxy serves (or binds) an external or load-balancer IP that is a node's own
    address or any Node's; we refuse it (an unusable address may stand beside it)."""
    found = _addresses_only_kube_proxy_holds(difference)
    if found is None or _ALLOCATED_SETS.match(difference.subject):
        return False
    if difference.section == "ipvs" and not set(found) <= _user_written(context, owners):
        return False
    nodes = context.node_addresses
    return any(a in nodes for a in found) and all(a in nodes or _refused(a) for a in found)


def _internal_local_cluster_ip(
    difference: Difference, owners: tuple[str, ...], context: Context
) -> bool:
    """kube-proxy gives the cluster IP of an internalTrafficPolicy Local service that is also
    reachable from outside (NodePort, LoadBalancer, externalIPs) the cluster-wide endpoints
    when none is on the node; we give it none, as the policy says."""
    if difference.section != "ipvs" or not difference.subject.endswith("real servers"):
        return False
    if not difference.ours.startswith("(none)") or len(owners) != 1:
        return False
    spec = _spec(context, owners[0])
    address = difference.subject.split()[1].rsplit(":", 1)[0].strip("[]")
    outside = spec.get("type") in ("NodePort", "LoadBalancer") or bool(spec.get("externalIPs"))
    return (
        spec.get("internalTrafficPolicy") == "Local"
        and outside
        and address in spec.get("clusterIPs", [])
    )


def _contested(difference: Difference, owners: tuple[str, ...], context: Context) -> bool:
    """Two services claim one virtual server: kube-proxy's real servers are whichever service
    its map gave last; ours are the older service's (the API-allocated address's)."""
    return (
        difference.section == "ipvs"
        and difference.subject.endswith("real servers")
        and len(owners) > 1
    )


def _health_check_without_node_addresses(
    difference: Difference, owners: tuple[str, ...], context: Context
) -> bool:
    """kube-proxy opens a health-check node port in a family where --nodeport-addresses
    leaves the node no address (and its health server listens nowhere); we do not."""
    sets = ("KUBE-HEALTH-CHECK-NODE-PORT members", "KUBE-6-HEALTH-CHECK-NODE-PORT members")
    if difference.section != "ipset" or difference.subject not in sets:
        return False
    family = 6 if "-6-" in difference.subject else 4
    return _only_kube_proxys(difference) is not None and not context.node_port_addresses[family]


EXPLANATIONS: tuple[Explanation, ...] = (
    Explanation("scheduler-annotation", _annotated_scheduler),
    Explanation("unusable-addresses", _unusable_address),
    Explanation("node-addresses", _node_address),
    Explanation("internal-local-cluster-ip", _internal_local_cluster_ip),
    Explanation("contested-virtual-servers", _contested),
    Explanation("health-check-without-node-addresses", _health_check_without_node_addresses),
)


def node_port_families(nodeport_addresses: tuple[str, ...], node: NodeLayout) -> dict[int, bool]:
    """Whether kube-proxy's node has NodePort addresses in each family under the flag: all
    of its addresses without CIDRs of the family, else those inside them ("primary": the
    Node object's, which the node has)."""
    listed = {node.ipv4, node.ipv6}
    found = {}
    for version in (4, 6):
        mine = [ipaddress.ip_address(a) for a in node.interface_addresses()]
        mine = [a for a in mine if a.version == version]
        if "primary" in nodeport_addresses:
            found[version] = any(str(a) in listed for a in mine)
            continue
        cidrs = [ipaddress.ip_network(c, strict=False) for c in nodeport_addresses]
        cidrs = [c for c in cidrs if c.version == version]
        found[version] = not cidrs or any(a in c for a in mine for c in cidrs)
    return found


def explain(difference: Difference, owners: tuple[str, ...], context: Context) -> str | None:
    """The name of the deliberate difference this is, or None."""
    for explanation in EXPLANATIONS:
        if explanation.applies(difference, owners, context):
            return explanation.name
    return None
