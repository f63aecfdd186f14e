from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ipvsproxy.cluster.parse import snapshot_from_objects
from ipvsproxy.cluster.source import load_snapshot
from ipvsproxy.model import (
    AddressKind,
    DesiredState,
    ServiceFlags,
    TransportProtocol,
    VirtualServerKey,
)
from ipvsproxy.translate import Settings, parse_nodeport_addresses, translate

EXAMPLE = Path(__file__).parents[2] / "examples" / "cluster.yaml"
NODE_IP = "192.168.0.1"
NODE = {
    "kind": "Node",
    "metadata": {"name": "node-a", "labels": {"topology.kubernetes.io/zone": "z1"}},
    "status": {"addresses": [{"type": "InternalIP", "address": NODE_IP}]},
}


def vs(protocol: str, address: str, port: int) -> VirtualServerKey:
    return VirtualServerKey(TransportProtocol(protocol), ipaddress.ip_address(address), port)


def reals(state: DesiredState, key: VirtualServerKey) -> set[str]:
    return {str(k) for k in state.virtual_servers[key].real_servers}


def svc(spec: dict[str, Any], name: str = "s", **metadata: Any) -> dict[str, Any]:
    spec = {"clusterIP": "10.96.0.1", "ports": [{"name": "p", "port": 80}], **spec}
    return {
        "kind": "Service",
        "metadata": {"name": name, "namespace": "ns", **metadata},
        "spec": spec,
    }


def ep(address: str, node: str = "node-a", **conditions: bool) -> dict[str, Any]:
    return {"addresses": [address], "nodeName": node, "conditions": conditions}


def eps(
    endpoints: list[dict[str, Any]],
    service: str = "s",
    name: str = "e",
    address_type: str = "IPv4",
    ports: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "labels": {"kubernetes.io/service-name": service},
        },
        "addressType": address_type,
        "endpoints": endpoints,
        "ports": ports if ports is not None else [{"name": "p", "port": 8080}],
    }


def run(objects: list[dict[str, Any]], flags: Settings | None = None) -> DesiredState:
    snapshot, _ = snapshot_from_objects([NODE, *objects], "node-a")
    return translate(snapshot, flags or Settings())


def test_example_cluster() -> None:
    snapshot, _ = load_snapshot(EXAMPLE, "node-a")
    state = translate(snapshot, Settings())
    assert state.rejections == ()
    assert reals(state, vs("UDP", "10.96.0.10", 53)) == {"10.244.0.5:53", "10.244.1.7:53"}
    assert reals(state, vs("TCP", "10.96.0.10", 9153)) == {"10.244.0.5:9153", "10.244.1.7:9153"}
    web = state.virtual_servers[vs("TCP", "10.96.12.5", 80)].server
    assert (web.flags, web.timeout) == (ServiceFlags.PERSISTENT, 3600)
    assert reals(state, vs("TCP", "192.168.10.11", 30080)) == {
        "10.244.0.20:8080",
        "10.244.1.21:8080",
    }
    assert reals(state, vs("TCP", "203.0.113.10", 443)) == {"10.244.0.30:8443"}
    assert reals(state, vs("TCP", "10.96.40.1", 443)) == {"10.244.0.30:8443", "10.244.2.31:8443"}
    assert state.node_addresses == {ipaddress.ip_address("192.168.10.11")}
    assert {str(a) for a in state.bound_addresses} == {
        "10.96.0.10",
        "10.96.12.5",
        "10.96.40.1",
        "203.0.113.10",
    }
    assert len(state.virtual_servers) == 8
    assert dict(state.health_check_node_ports) == {
        next(k for k in snapshot.services if k.name == "gateway"): 32000
    }


def test_headless_and_external_name_produce_nothing() -> None:
    state = run([svc({"clusterIP": "None"}), svc({"type": "ExternalName"}, name="x")])
    assert state.virtual_servers == {}


@pytest.mark.parametrize(
    ("labels", "proxy_name", "expected"),
    [
        ({}, "", 1),
        ({"service.kubernetes.io/service-proxy-name": "other"}, "", 0),
        ({"service.kubernetes.io/service-proxy-name": "me"}, "me", 1),
        # An empty value still names some proxy: kube-proxy's !label selector skips it.
        ({"service.kubernetes.io/service-proxy-name": ""}, "", 0),
        ({}, "me", 0),
    ],
)
def test_service_proxy_name_label(labels: dict[str, str], proxy_name: str, expected: int) -> None:
    state = run([svc({}, labels=labels)], Settings(service_proxy_name=proxy_name))
    assert len(state.virtual_servers) == expected


def test_ports_matched_by_name_and_slices_merged_without_duplicates() -> None:
    service = svc({"ports": [{"name": "a", "port": 80}, {"name": "b", "port": 81}]})
    ports = [{"name": "a", "port": 8080}, {"name": "b", "port": 9090}]
    state = run(
        [
            service,
            eps([ep("10.1.0.1"), ep("10.1.0.2")], ports=ports),
            eps([ep("10.1.0.2"), ep("10.1.0.3")], name="e2", ports=ports),
        ]
    )
    assert reals(state, vs("TCP", "10.96.0.1", 80)) == {
        "10.1.0.1:8080",
        "10.1.0.2:8080",
        "10.1.0.3:8080",
    }
    assert reals(state, vs("TCP", "10.96.0.1", 81)) == {
        "10.1.0.1:9090",
        "10.1.0.2:9090",
        "10.1.0.3:9090",
    }


def test_dual_stack_each_family_gets_its_own_endpoints() -> None:
    state = run(
        [
            svc({"clusterIPs": ["10.96.0.1", "fd00::1"]}),
            eps([ep("10.1.0.1")]),
            eps([ep("fd01::1")], name="e6", address_type="IPv6"),
        ]
    )
    assert reals(state, vs("TCP", "10.96.0.1", 80)) == {"10.1.0.1:8080"}
    assert reals(state, vs("TCP", "fd00::1", 80)) == {"[fd01::1]:8080"}


def test_external_ips_and_proxy_mode_ingress() -> None:
    service = svc(
        {"type": "LoadBalancer", "externalIPs": ["198.51.100.1"]},
    ) | {
        "status": {
            "loadBalancer": {
                "ingress": [{"ip": "203.0.113.1"}, {"ip": "203.0.113.2", "ipMode": "Proxy"}]
            }
        }
    }
    state = run([service])
    kinds = {str(k.address): d.kind for k, d in state.virtual_servers.items()}
    assert kinds == {
        "10.96.0.1": AddressKind.CLUSTER_IP,
        "198.51.100.1": AddressKind.EXTERNAL_IP,
        "203.0.113.1": AddressKind.LOAD_BALANCER,
    }


def test_nodeport_only_inside_nodeport_addresses() -> None:
    service = svc({"type": "NodePort", "ports": [{"name": "p", "port": 80, "nodePort": 30001}]})
    state = run([service], Settings(nodeport_addresses=(ipaddress.ip_network("10.0.0.0/8"),)))
    assert state.node_addresses == frozenset()
    state = run([service])
    assert vs("TCP", "192.168.0.1", 30001) in state.virtual_servers


def test_external_local_keeps_cluster_ip_global() -> None:
    service = svc(
        {
            "type": "NodePort",
            "externalTrafficPolicy": "Local",
            "ports": [{"name": "p", "port": 80, "nodePort": 30001}],
        }
    )
    state = run([service, eps([ep("10.1.0.1"), ep("10.1.0.2", node="node-b")])])
    assert reals(state, vs("TCP", "192.168.0.1", 30001)) == {"10.1.0.1:8080"}
    assert reals(state, vs("TCP", "10.96.0.1", 80)) == {"10.1.0.1:8080", "10.1.0.2:8080"}


def test_internal_local() -> None:
    state = run([svc({"internalTrafficPolicy": "Local"}), eps([ep("10.1.0.1", node="node-b")])])
    assert reals(state, vs("TCP", "10.96.0.1", 80)) == set()
    assert dict(state.no_local_endpoints) == {"internal": 1, "external": 0}


LOCAL_LOAD_BALANCER = svc(
    {
        "type": "LoadBalancer",
        "externalTrafficPolicy": "Local",
        "externalIPs": ["198.51.100.1"],
        "ports": [{"name": "p", "port": 80, "nodePort": 30001}],
    }
) | {"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.1"}]}}}
EXTERNAL_VIRTUAL_SERVERS = [
    vs("TCP", "192.168.0.1", 30001),
    vs("TCP", "198.51.100.1", 80),
    vs("TCP", "203.0.113.1", 80),
]


def test_external_local_without_local_endpoints_serves_cluster_wide_as_kube_proxy() -> None:
    remote = [ep("10.1.0.2", node="node-b"), ep("10.1.0.3", node="node-c")]
    state = run([LOCAL_LOAD_BALANCER, eps(remote)])
    for key in EXTERNAL_VIRTUAL_SERVERS:
        assert reals(state, key) == {"10.1.0.2:8080", "10.1.0.3:8080"}, key
    assert dict(state.no_local_endpoints) == {"internal": 0, "external": 1}
    # The -LOCAL sets still keep outside clients' source addresses as kube-proxy does.
    assert state.ipsets["KUBE-LOAD-BALANCER-LOCAL"].entries == frozenset({"203.0.113.1,tcp:80"})


def test_external_local_with_a_local_endpoint_keeps_to_it_and_counts_nothing() -> None:
    state = run([LOCAL_LOAD_BALANCER, eps([ep("10.1.0.1"), ep("10.1.0.2", node="node-b")])])
    for key in EXTERNAL_VIRTUAL_SERVERS:
        assert reals(state, key) == {"10.1.0.1:8080"}, key
    assert dict(state.no_local_endpoints) == {"internal": 0, "external": 0}


@pytest.mark.parametrize(
    "endpoints",
    [[], [ep("10.1.0.2", node="node-b", ready=False)]],
    ids=["no endpoints", "none usable"],
)
def test_external_local_without_usable_endpoints_anywhere_is_not_counted(
    endpoints: list[dict[str, Any]],
) -> None:
    state = run([LOCAL_LOAD_BALANCER, eps(endpoints)])
    assert all(reals(state, key) == set() for key in EXTERNAL_VIRTUAL_SERVERS)
    assert dict(state.no_local_endpoints) == {"internal": 0, "external": 0}


def test_both_policies_local_fall_back_only_on_external_addresses() -> None:
    both = LOCAL_LOAD_BALANCER | {
        "spec": {**LOCAL_LOAD_BALANCER["spec"], "internalTrafficPolicy": "Local"}
    }
    state = run([both, eps([ep("10.1.0.2", node="node-b")])])
    assert reals(state, vs("TCP", "10.96.0.1", 80)) == set()
    assert reals(state, vs("TCP", "192.168.0.1", 30001)) == {"10.1.0.2:8080"}
    assert dict(state.no_local_endpoints) == {"internal": 1, "external": 1}


def test_no_local_endpoints_counts_services_not_ports() -> None:
    service = LOCAL_LOAD_BALANCER | {
        "spec": {
            **LOCAL_LOAD_BALANCER["spec"],
            "ports": [
                {"name": "p", "port": 80, "nodePort": 30001},
                {"name": "q", "port": 81, "nodePort": 30002},
            ],
        }
    }
    slice_ports = [{"name": "p", "port": 8080}, {"name": "q", "port": 8081}]
    state = run([service, eps([ep("10.1.0.2", node="node-b")], ports=slice_ports)])
    assert reals(state, vs("TCP", "192.168.0.1", 30002)) == {"10.1.0.2:8081"}
    assert dict(state.no_local_endpoints) == {"internal": 0, "external": 1}


@pytest.mark.parametrize(
    ("endpoints", "expected"),
    [
        (
            [ep("10.1.0.1"), ep("10.1.0.2", ready=False, serving=True, terminating=True)],
            {"10.1.0.1:8080"},
        ),
        ([ep("10.1.0.2", ready=False, serving=True, terminating=True)], {"10.1.0.2:8080"}),
        ([ep("10.1.0.3", ready=False, serving=False, terminating=True)], set()),
        ([ep("10.1.0.4", ready=False)], set()),
    ],
)
def test_endpoint_conditions(endpoints: list[dict[str, Any]], expected: set[str]) -> None:
    assert reals(run([svc({}), eps(endpoints)]), vs("TCP", "10.96.0.1", 80)) == expected


def test_scheduler_flag_and_annotation() -> None:
    state = run(
        [
            svc({}),
            svc({"clusterIP": "10.96.0.2"}, name="t", annotations={"ipvsproxy.io/scheduler": "sh"}),
            svc(
                {"clusterIP": "10.96.0.3"},
                name="u",
                annotations={"ipvsproxy.io/scheduler": "bogus"},
            ),
        ],
        Settings(scheduler="lc"),
    )
    assert state.virtual_servers[vs("TCP", "10.96.0.1", 80)].server.scheduler == "lc"
    assert state.virtual_servers[vs("TCP", "10.96.0.2", 80)].server.scheduler == "sh"
    assert vs("TCP", "10.96.0.3", 80) not in state.virtual_servers
    assert [r.object for r in state.rejections] == ["Service ns/u"]


def test_bad_cluster_ip_and_fqdn_slice_are_rejected_alone() -> None:
    state = run(
        [
            svc({}),
            svc({"clusterIP": "10.96.0.999"}, name="bad"),
            eps([{"addresses": ["x.example"]}], name="f", address_type="FQDN"),
        ]
    )
    assert list(state.virtual_servers) == [vs("TCP", "10.96.0.1", 80)]
    assert {r.object for r in state.rejections} == {"Service ns/bad", "EndpointSlice ns/f"}


def test_exclude_cidrs_recorded() -> None:
    cidr = ipaddress.ip_network("10.200.0.0/16")
    assert run([], Settings(exclude_cidrs=(cidr,))).exclude_cidrs == (cidr,)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.permutations(
        [
            svc(
                {
                    "type": "NodePort",
                    "externalTrafficPolicy": "Local",
                    "ports": [{"name": "p", "port": 80, "nodePort": 30001}],
                }
            ),
            svc({"clusterIP": "10.96.0.2", "internalTrafficPolicy": "Local"}, name="t"),
            eps([ep("10.1.0.1"), ep("10.1.0.2", node="node-b")]),
            eps([ep("10.1.0.5", node="node-b"), ep("10.1.0.6")], service="t", name="f"),
            eps([ep("10.1.0.2", node="node-b")], name="g"),
        ]
    )
)
def test_order_independent_local_only_and_addresses_bound(objects: list[dict[str, Any]]) -> None:
    state = run(objects)
    assert state == run(list(reversed(objects)))
    addresses = state.bound_addresses | state.node_addresses
    for key, desired in state.virtual_servers.items():
        assert key.address in addresses
        if desired.kind is AddressKind.NODE_PORT or desired.owner.service.name == "t":
            assert all(str(r.address) in {"10.1.0.1", "10.1.0.6"} for r in desired.real_servers)


def test_external_and_lb_ips_of_a_family_without_cluster_ip_are_skipped() -> None:
    service = svc(
        {"type": "LoadBalancer", "externalIPs": ["198.51.100.1", "2001:db8::1"]},
    ) | {"status": {"loadBalancer": {"ingress": [{"ip": "2001:db8::2"}, {"ip": "203.0.113.1"}]}}}
    state = run([service])
    assert {str(k.address) for k in state.virtual_servers} == {
        "10.96.0.1",
        "198.51.100.1",
        "203.0.113.1",
    }


def test_mh_scheduler_hashes_on_source_port_as_kube_proxy() -> None:
    state = run([svc({})], Settings(scheduler="mh"))
    assert state.virtual_servers[vs("TCP", "10.96.0.1", 80)].server.flags == ServiceFlags.SCHED2


def test_nodeport_never_on_loopback_or_ipv6_link_local() -> None:
    node = NODE | {
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": "192.168.0.1"},
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "InternalIP", "address": "fe80::1"},
            ]
        }
    }
    service = svc({"type": "NodePort", "ports": [{"name": "p", "port": 80, "nodePort": 30001}]})
    snapshot, _ = snapshot_from_objects([node, service], "node-a")
    wide = (ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0"))
    state = translate(snapshot, Settings(nodeport_addresses=wide))
    assert {str(a) for a in state.node_addresses} == {"192.168.0.1"}


def test_health_check_node_port_only_for_local_load_balancers() -> None:
    spec = {"externalTrafficPolicy": "Local", "healthCheckNodePort": 32000}
    state = run([svc({"type": "NodePort", **spec}), svc({"type": "LoadBalancer", **spec}, "lb")])
    assert {key.name: port for key, port in state.health_check_node_ports.items()} == {"lb": 32000}


NODE_PORT_SERVICE = svc(
    {"type": "NodePort", "ports": [{"name": "p", "port": 80, "nodePort": 30001}]}
)
DUAL_NODE = NODE | {
    "status": {
        "addresses": [
            {"type": "InternalIP", "address": "192.168.0.1"},
            {"type": "ExternalIP", "address": "198.51.100.20"},
            {"type": "InternalIP", "address": "fd00::10"},
        ]
    }
}


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([], {"192.168.0.1", "198.51.100.20"}),
        (["198.51.100.0/24"], {"198.51.100.20"}),
        (["198.51.100.20/8", " 10.0.0.0/8"], {"198.51.100.20"}),
        # primary: the node's first address of each family the service has
        (["primary"], {"192.168.0.1"}),
    ],
)
def test_nodeport_addresses_flag(values: list[str], expected: set[str]) -> None:
    networks, primary = parse_nodeport_addresses(values)
    snapshot, _ = snapshot_from_objects([DUAL_NODE, NODE_PORT_SERVICE], "node-a")
    state = translate(snapshot, Settings(nodeport_addresses=networks, nodeport_primary=primary))
    assert {str(a) for a in state.node_addresses} == expected


@pytest.mark.parametrize("values", [["primary", "10.0.0.0/8"], ["10.0.0.0/33"], ["x"]])
def test_nodeport_addresses_flag_rejects_what_kube_proxy_rejects(values: list[str]) -> None:
    with pytest.raises(ValueError, match=r"primary|CIDR"):
        parse_nodeport_addresses(values)


def test_a_cluster_ip_that_is_the_nodes_address_is_refused_and_node_ports_stay() -> None:
    # Bound on kube-ipvs0 it would take the node's own address, and with it every NodePort:
    # only the service that claims it loses it.
    clashing = svc({"clusterIP": "192.168.0.1"}, name="clash")
    state = run([NODE_PORT_SERVICE, clashing])
    assert vs("TCP", "192.168.0.1", 30001) in state.virtual_servers
    assert vs("TCP", "192.168.0.1", 80) not in state.virtual_servers
    assert state.node_addresses == frozenset({vs("TCP", "192.168.0.1", 1).address})
    assert vs("TCP", "192.168.0.1", 1).address not in state.bound_addresses
    assert [(r.object, r.reason) for r in state.rejections] == [
        ("Service ns/clash", "clusterIP 192.168.0.1 is this node's address; ignored")
    ]


def test_ingress_ips_count_whatever_the_type_says_as_kube_proxy() -> None:
    service = svc({}) | {"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.9"}]}}}
    state = run([service])
    assert state.virtual_servers[vs("TCP", "203.0.113.9", 80)].kind is AddressKind.LOAD_BALANCER
