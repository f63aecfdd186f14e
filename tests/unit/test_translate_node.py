"""The node's own addresses come from its interfaces, as kube-proxy reads them, not from the
Node object: NodePorts, "is this address local", and the health-check node port set."""

from __future__ import annotations

import ipaddress
from collections.abc import Set as AbstractSet
from dataclasses import replace
from typing import Any

from ipvsproxy.cluster.parse import snapshot_from_objects
from ipvsproxy.model import DesiredState, IPAddress, SkipReason
from ipvsproxy.translate import Settings, parse_nodeport_addresses, translate
from tests.unit.test_translate_rules import NODE, NODE_IP, ep, eps, svc, vs

LISTED = NODE_IP  # the Node object's InternalIP
SECOND_NIC = "10.251.0.11"  # on an interface, not in the Node object
NODE_PORT = svc({"type": "NodePort", "ports": [{"name": "p", "port": 80, "nodePort": 30080}]})
LOCAL_LB = svc(
    {
        "type": "LoadBalancer",
        "externalTrafficPolicy": "Local",
        "healthCheckNodePort": 32000,
        "ports": [{"name": "p", "port": 80, "nodePort": 30080}],
    }
)


def addresses(*texts: str) -> frozenset[IPAddress]:
    return frozenset(ipaddress.ip_address(text) for text in texts)


def run(
    objects: list[dict[str, Any]],
    local: frozenset[IPAddress] | None,
    flags: Settings | None = None,
) -> DesiredState:
    snapshot, _ = snapshot_from_objects([NODE, *objects], "node-a")
    return translate(replace(snapshot, local_addresses=local), flags or Settings())


def node_ports(state: DesiredState) -> set[str]:
    return {str(key.address) for key in state.virtual_servers if key.port == 30080}


def test_node_ports_on_every_interface_address_the_node_object_lists_or_not() -> None:
    local = addresses(LISTED, SECOND_NIC, "169.254.1.1", "127.0.0.1", "::1", "fe80::1")
    state = run([NODE_PORT], local)
    # As kube-proxy: loopback and IPv6 link-local never; an IPv4 link-local address is one.
    assert node_ports(state) == {LISTED, SECOND_NIC, "169.254.1.1"}
    assert state.node_port_addresses == addresses(LISTED, SECOND_NIC, "169.254.1.1")


def test_an_address_the_node_object_lists_but_no_interface_has_gets_no_node_port() -> None:
    assert node_ports(run([NODE_PORT], addresses(SECOND_NIC))) == {SECOND_NIC}


def test_without_a_kernel_reading_the_node_objects_addresses_stand_in() -> None:
    assert node_ports(run([NODE_PORT], None)) == {LISTED}


def test_an_external_ip_on_a_second_nic_is_the_nodes_own_refused_and_not_bound() -> None:
    """The Node object does not list it, yet it is this node's: the tenant rule refuses it
    (kube-proxy serves it there: docs/kube-proxy-differences.md, node-addresses)."""
    external = svc({"externalIPs": [SECOND_NIC]}, name="x")
    state = run([external, eps([ep("10.244.0.5")], service="x")], addresses(LISTED, SECOND_NIC))
    assert ipaddress.ip_address(SECOND_NIC) not in state.bound_addresses
    assert vs("TCP", SECOND_NIC, 80) not in state.virtual_servers
    assert [r.category for r in state.rejections] == [SkipReason.NODE_ADDRESS]


def test_nodeport_addresses_cidrs_filter_the_interface_addresses() -> None:
    cidrs, _ = parse_nodeport_addresses(["10.251.0.0/16"])
    state = run([NODE_PORT], addresses(LISTED, SECOND_NIC), Settings(nodeport_addresses=cidrs))
    assert node_ports(state) == {SECOND_NIC}


def test_nodeport_addresses_primary_is_the_listed_address_where_an_interface_has_it() -> None:
    primary = Settings(nodeport_primary=True)
    assert node_ports(run([NODE_PORT], addresses(LISTED, SECOND_NIC), primary)) == {LISTED}
    assert node_ports(run([NODE_PORT], addresses(SECOND_NIC), primary)) == set()


def health_check_set(state: DesiredState) -> AbstractSet[str]:
    return state.ipsets["KUBE-HEALTH-CHECK-NODE-PORT"].entries


def test_health_check_node_port_opens_only_where_node_ports_are_served() -> None:
    """With --nodeport-addresses matching no address, nothing listens on the health-check
    node port, and KUBE-HEALTH-CHECK-NODE-PORT must not open it through INPUT."""
    local = addresses(LISTED, SECOND_NIC)
    matching, _ = parse_nodeport_addresses(["192.168.0.0/24"])
    nothing, _ = parse_nodeport_addresses(["172.31.0.0/16"])
    state = run([LOCAL_LB], local, Settings(nodeport_addresses=matching))
    assert health_check_set(state) == {"32000"}
    state = run([LOCAL_LB], local, Settings(nodeport_addresses=nothing))
    assert health_check_set(state) == frozenset()
    # The health-check server is still wanted: where it listens is the daemon's business.
    assert list(state.health_check_node_ports.values()) == [32000]


def test_nodeport_addresses_apply_per_family_and_a_family_without_any_keeps_them_all() -> None:
    """kube-proxy's per-family proxiers: CIDRs of IPv4 only leave IPv6 unfiltered (it warns
    that NodePorts are then accepted on every IPv6 address), and the reverse."""
    local = addresses(LISTED, SECOND_NIC, "fd00::10", "fd00:251::11")
    v4_only, _ = parse_nodeport_addresses(["10.251.0.0/16"])
    dual = NODE_PORT | {"spec": {**NODE_PORT["spec"], "ipFamilyPolicy": "RequireDualStack",
                                 "clusterIPs": ["10.96.0.1", "fd00:96::1"]}}  # fmt: skip
    state = run([dual], local, Settings(nodeport_addresses=v4_only))
    assert node_ports(state) == {SECOND_NIC, "fd00::10", "fd00:251::11"}
    v6_only, _ = parse_nodeport_addresses(["fd00:251::/64"])
    state = run([dual], local, Settings(nodeport_addresses=v6_only))
    assert node_ports(state) == {LISTED, SECOND_NIC, "fd00:251::11"}
    # primary: the Node lists no IPv6 address, so IPv6 keeps every address.
    state = run([dual], local, Settings(nodeport_primary=True))
    assert node_ports(state) == {LISTED, "fd00::10", "fd00:251::11"}
