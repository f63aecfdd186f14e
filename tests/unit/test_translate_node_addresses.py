"""No Service takes a Node's address: not this node's, not another node's (CVE-2020-8554)."""

from __future__ import annotations

import ipaddress
from dataclasses import replace
from typing import Any

import pytest

from ipvsproxy.cluster.parse import snapshot_from_objects
from ipvsproxy.model import DesiredState, Rejection, SkipReason
from ipvsproxy.translate import ServiceCache, Settings, translate
from tests.unit.test_translate_rules import NODE, svc, vs

OTHER_NODE = {
    "kind": "Node",
    "metadata": {"name": "node-b"},
    "status": {
        "addresses": [
            {"type": "InternalIP", "address": "192.168.0.2"},
            {"type": "ExternalIP", "address": "203.0.113.2"},
            {"type": "Hostname", "address": "node-b"},
        ]
    },
}


def run(objects: list[dict[str, Any]], flags: Settings | None = None) -> DesiredState:
    snapshot, _ = snapshot_from_objects([NODE, OTHER_NODE, *objects], "node-a")
    return translate(snapshot, flags or Settings())


def node_address_rejections(state: DesiredState) -> list[Rejection]:
    return [r for r in state.rejections if r.category is SkipReason.NODE_ADDRESS]


def load_balancer(*ingress: str, **spec: Any) -> dict[str, Any]:
    obj = svc({"type": "LoadBalancer", **spec})
    obj["status"] = {"loadBalancer": {"ingress": [{"ip": ip} for ip in ingress]}}
    return obj


@pytest.mark.parametrize(
    ("address", "owner"),
    [
        ("192.168.0.1", "this node's"),
        ("192.168.0.2", "Node node-b's"),
        ("203.0.113.2", "Node node-b's"),
    ],
)
def test_an_external_ip_that_is_a_node_address_is_refused_named_and_counted(
    address: str, owner: str
) -> None:
    ports = [{"name": name, "port": port} for name, port in (("ssh", 22), ("kubelet", 10250))]
    state = run([svc({"externalIPs": [address, "198.51.100.7"], "ports": ports})])

    taken = [key for key in state.virtual_servers if str(key.address) == address]
    assert taken == []
    assert ipaddress.ip_address(address) not in state.bound_addresses | state.node_addresses
    assert node_address_rejections(state) == [
        Rejection(
            "Service ns/s",
            f"externalIP {address} is {owner} address; ignored",
            SkipReason.NODE_ADDRESS,
        )
    ]
    assert state.skipped_by_reason()[SkipReason.NODE_ADDRESS] == 1
    # The rest of the service is served: only the node's address is refused.
    assert vs("TCP", "198.51.100.7", 22) in state.virtual_servers
    assert vs("TCP", "10.96.0.1", 10250) in state.virtual_servers


@pytest.mark.parametrize("address", ["192.168.0.1", "192.168.0.2"])
def test_a_load_balancer_ingress_ip_that_is_a_node_address_is_refused(address: str) -> None:
    state = run([load_balancer(address, "198.51.100.8")])
    assert not [key for key in state.virtual_servers if str(key.address) == address]
    assert vs("TCP", "198.51.100.8", 80) in state.virtual_servers
    [refused] = node_address_rejections(state)
    assert refused.reason.startswith(f"load-balancer ingress IP {address} is ")


def test_a_cluster_ip_on_this_nodes_address_is_refused_alike() -> None:
    state = run([svc({"clusterIPs": ["192.168.0.1"], "externalIPs": ["198.51.100.9"]})])
    assert state.virtual_servers == {}
    assert [r.reason for r in node_address_rejections(state)] == [
        "clusterIP 192.168.0.1 is this node's address; ignored"
    ]


def test_a_cluster_ip_another_node_claims_stays_the_services() -> None:
    """The API server allocates cluster IPs, and a Node's status is its kubelet's to write:
    one node must not take a Service from every node by claiming its address."""
    state = run([svc({"clusterIPs": ["192.168.0.2"]})])
    assert vs("TCP", "192.168.0.2", 80) in state.virtual_servers
    assert node_address_rejections(state) == []


def test_the_node_port_addresses_are_never_taken_by_a_written_address() -> None:
    """--nodeport-addresses selects this node's addresses that serve NodePorts: a Service
    may write one into externalIPs, but never gets it."""
    flags = Settings(nodeport_addresses=(ipaddress.ip_network("192.168.0.0/24"),))
    service = svc({"type": "NodePort", "externalIPs": ["192.168.0.1"]})
    service["spec"]["ports"][0]["nodePort"] = 30080
    state = run([service], flags)
    assert set(state.virtual_servers) == {
        vs("TCP", "10.96.0.1", 80),
        vs("TCP", "192.168.0.1", 30080),
    }
    assert [r.reason for r in node_address_rejections(state)] == [
        "externalIP 192.168.0.1 is this node's address; ignored"
    ]


def test_an_address_of_a_node_not_yet_known_is_served_until_it_is_then_refused() -> None:
    """The guard follows the Nodes: a cache kept across translations forgets what it learnt
    of the services whose addresses moved, and nothing else."""
    cache = ServiceCache()
    services = [svc({"externalIPs": ["192.168.0.3"]}), svc({"clusterIP": "10.96.0.2"}, name="t")]
    before, _ = snapshot_from_objects([NODE, OTHER_NODE, *services], "node-a")
    joined = {**OTHER_NODE, "metadata": {"name": "node-c"}}
    joined["status"] = {"addresses": [{"type": "InternalIP", "address": "192.168.0.3"}]}
    read_again, _ = snapshot_from_objects([NODE, OTHER_NODE, joined], "node-a")
    after = replace(before, nodes_by_address=read_again.nodes_by_address)

    first = translate(before, Settings(), cache)
    second = translate(after, Settings(), cache)

    assert vs("TCP", "192.168.0.3", 80) in first.virtual_servers
    assert vs("TCP", "192.168.0.3", 80) not in second.virtual_servers
    assert [r.reason for r in node_address_rejections(second)] == [
        "externalIP 192.168.0.3 is Node node-c's address; ignored"
    ]
    assert second == translate(after, Settings())
    untouched = vs("TCP", "10.96.0.2", 80)
    assert second.virtual_servers[untouched] is first.virtual_servers[untouched]
