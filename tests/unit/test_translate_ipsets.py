from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import pytest

from ipvsproxy.cluster.parse import snapshot_from_objects
from ipvsproxy.cluster.source import load_snapshot
from ipvsproxy.model import IPFamily
from ipvsproxy.translate import Settings, translate
from tests.unit.test_translate_rules import DUAL_NODE, ep, eps, run, svc

EXAMPLE = Path(__file__).parents[2] / "examples" / "cluster.yaml"


def filled(objects: list[dict[str, Any]], flags: Settings | None = None) -> dict[str, set[str]]:
    ipsets = run(objects, flags).ipsets
    return {name: set(content.entries) for name, content in ipsets.items() if content.entries}


def test_example_cluster_ipsets() -> None:
    snapshot, _ = load_snapshot(EXAMPLE, "node-a")
    ipsets = translate(snapshot, Settings()).ipsets
    found = {name: set(content.entries) for name, content in ipsets.items() if content.entries}
    assert found == {
        "KUBE-CLUSTER-IP": {
            "10.96.0.10,tcp:53",
            "10.96.0.10,tcp:9153",
            "10.96.0.10,udp:53",
            "10.96.12.5,tcp:80",
            "10.96.40.1,tcp:443",
        },
        "KUBE-HEALTH-CHECK-NODE-PORT": {"32000"},
        "KUBE-IPVS-IPS": {"10.96.0.10", "10.96.12.5", "10.96.40.1", "203.0.113.10"},
        "KUBE-LOAD-BALANCER": {"203.0.113.10,tcp:443"},
        "KUBE-LOAD-BALANCER-LOCAL": {"203.0.113.10,tcp:443"},
        "KUBE-LOOP-BACK": {
            "10.244.0.20,tcp:8080,10.244.0.20",
            "10.244.0.30,tcp:8443,10.244.0.30",
            "10.244.0.5,tcp:53,10.244.0.5",
            "10.244.0.5,tcp:9153,10.244.0.5",
            "10.244.0.5,udp:53,10.244.0.5",
        },
        "KUBE-NODE-PORT-LOCAL-TCP": {"31443"},
        "KUBE-NODE-PORT-TCP": {"30080", "31443"},
    }


def test_every_set_exists_for_both_families_with_kube_proxy_types() -> None:
    snapshot, _ = load_snapshot(EXAMPLE, "node-a")
    ipsets = translate(snapshot, Settings()).ipsets
    assert ipsets["KUBE-6-CLUSTER-IP"].spec.family is IPFamily.IPV6
    assert ipsets["KUBE-LOOP-BACK"].spec.set_type == "hash:ip,port,ip"
    assert ipsets["KUBE-NODE-PORT-UDP"].spec.set_type == "bitmap:port"
    assert ipsets["KUBE-NODE-PORT-SCTP-HASH"].spec.set_type == "hash:ip,port"
    assert ipsets["KUBE-LOAD-BALANCER-SOURCE-CIDR"].spec.set_type == "hash:ip,port,net"
    assert ipsets["KUBE-LOAD-BALANCER-SOURCE-IP"].spec.set_type == "hash:ip,port,ip"
    assert ipsets["KUBE-IPVS-IPS"].spec.set_type == "hash:ip"
    assert len(ipsets) == 34


def test_ipv6_names_are_cut_to_ipsets_31_characters_as_kube_proxy_does() -> None:
    ipsets = run([]).ipsets
    assert "KUBE-6-NODE-PORT-LOCAL-SCTP-HAS" in ipsets
    assert "KUBE-6-LOAD-BALANCER-SOURCE-CID" in ipsets
    assert all(len(name) <= 31 for name in ipsets)


LB_STATUS = {"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.1"}]}}}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        # node 192.168.0.1 inside a range: the LB IP itself is an allowed source
        (
            {"loadBalancerSourceRanges": ["192.168.0.0/24", " 198.51.100.7/32 "]},
            {
                "KUBE-LOAD-BALANCER-FW": {"203.0.113.1,tcp:80"},
                "KUBE-LOAD-BALANCER-SOURCE-CIDR": {
                    "203.0.113.1,tcp:80,192.168.0.0/24",
                    "203.0.113.1,tcp:80,198.51.100.7",
                },
                "KUBE-LOAD-BALANCER-SOURCE-IP": {"203.0.113.1,tcp:80,203.0.113.1"},
            },
        ),
        # node outside every range: no source-IP entry (the node is blocked instead)
        (
            {"loadBalancerSourceRanges": ["10.0.0.1/8"]},
            {
                "KUBE-LOAD-BALANCER-FW": {"203.0.113.1,tcp:80"},
                "KUBE-LOAD-BALANCER-SOURCE-CIDR": {"203.0.113.1,tcp:80,10.0.0.0/8"},
            },
        ),
        # only ranges of the other family: no firewall in this one, as kube-proxy
        ({"loadBalancerSourceRanges": ["fd00::/8"]}, {}),
        # a zero-prefix range allows any source: no firewall, as kube-proxy
        ({"loadBalancerSourceRanges": ["10.0.0.0/8", "0.0.0.0/0"]}, {}),
        # a range that does not parse still closes the firewall
        (
            {"loadBalancerSourceRanges": ["nonsense"]},
            {"KUBE-LOAD-BALANCER-FW": {"203.0.113.1,tcp:80"}},
        ),
    ],
)
def test_load_balancer_source_ranges(spec: dict[str, Any], expected: dict[str, set[str]]) -> None:
    service = svc({"type": "LoadBalancer", **spec}) | LB_STATUS
    sets = filled([service])
    firewall = {name: entries for name, entries in sets.items() if "SOURCE" in name or "FW" in name}
    assert firewall == expected


def test_local_external_ip_goes_to_the_local_set_only() -> None:
    service = svc({"externalIPs": ["198.51.100.1"], "externalTrafficPolicy": "Local"})
    sets = filled([service])
    assert sets["KUBE-EXTERNAL-IP-LOCAL"] == {"198.51.100.1,tcp:80"}
    assert "KUBE-EXTERNAL-IP" not in sets


def test_ipvs_ips_holds_every_bound_address_per_family() -> None:
    service = svc({"clusterIPs": ["10.96.0.1", "fd00::1"], "externalIPs": ["198.51.100.1"]})
    sets = filled([service])
    assert sets["KUBE-IPVS-IPS"] == {"10.96.0.1", "198.51.100.1"}
    assert sets["KUBE-6-IPVS-IPS"] == {"fd00::1"}


def test_health_check_node_port_in_each_family_of_the_service() -> None:
    service = svc(
        {
            "type": "LoadBalancer",
            "clusterIPs": ["fd00::1"],
            "externalTrafficPolicy": "Local",
            "healthCheckNodePort": 32001,
        }
    )
    snapshot, _ = snapshot_from_objects([DUAL_NODE, service], "node-a")
    sets = translate(snapshot, Settings()).ipsets
    assert sets["KUBE-6-HEALTH-CHECK-NODE-PORT"].entries == {"32001"}
    assert not sets["KUBE-HEALTH-CHECK-NODE-PORT"].entries
    # A node without an IPv6 address serves no IPv6 NodePort, nor its health check.
    assert "KUBE-6-HEALTH-CHECK-NODE-PORT" not in filled([service])


def test_sctp_node_port_entries_name_each_node_address() -> None:
    service = svc(
        {
            "type": "NodePort",
            "ports": [{"name": "p", "port": 80, "protocol": "SCTP", "nodePort": 30001}],
        }
    )
    sets = filled(
        [service, eps([ep("10.1.0.1")], ports=[{"name": "p", "port": 80, "protocol": "SCTP"}])]
    )
    assert sets["KUBE-NODE-PORT-SCTP-HASH"] == {"192.168.0.1,sctp:30001"}
    assert sets["KUBE-LOOP-BACK"] == {"10.1.0.1,sctp:80,10.1.0.1"}


def test_an_external_ip_on_the_node_is_neither_bound_nor_served() -> None:
    state = run([svc({"externalIPs": ["192.168.0.1"]})])
    node_ip = ipaddress.ip_address("192.168.0.1")
    assert node_ip not in state.bound_addresses | state.node_addresses
    assert not [key for key in state.virtual_servers if key.address == node_ip]


def test_loop_back_holds_every_endpoint_on_this_node_as_kube_proxy() -> None:
    sets = filled(
        [
            svc(
                {"ports": [{"name": "p", "port": 80}, {"name": "d", "port": 53, "protocol": "UDP"}]}
            ),
            eps(
                [ep("10.1.0.1"), ep("10.1.0.2", ready=False), ep("10.1.0.3", node="node-b")],
                ports=[{"name": "p", "port": 8080}, {"name": "d", "port": 53, "protocol": "UDP"}],
            ),
        ]
    )
    assert sets["KUBE-LOOP-BACK"] == {
        "10.1.0.1,tcp:8080,10.1.0.1",
        "10.1.0.2,tcp:8080,10.1.0.2",
        "10.1.0.1,udp:53,10.1.0.1",
        "10.1.0.2,udp:53,10.1.0.2",
    }
