"""The node-port space: nodePorts and healthCheckNodePorts share the node's ports; those outside
--service-node-port-range or on the node's own are refused, and contests are settled."""

from __future__ import annotations

from typing import Any

import pytest

from ipvsproxy.model import DesiredState, ObjectKey, Rejection, SkipReason
from ipvsproxy.translate import Settings, translate
from ipvsproxy.translate.incremental import IncrementalTranslation
from tests.unit.test_translate_incremental import Cluster, comparable
from tests.unit.test_translate_rules import run, svc, vs

OLD, NEW = "2024-01-01T00:00:00Z", "2025-06-01T00:00:00Z"


def node_port(
    name: str,
    *node_ports: tuple[str, int],
    created: str | None = None,
    health_check: int | None = None,
    cluster_ip: str = "10.96.0.1",
) -> dict[str, Any]:
    """A LoadBalancer (Local, when it has a health check) with these (protocol, nodePort)s."""
    ports = [
        {"name": f"p{index}", "port": 80 + index, "protocol": protocol, "nodePort": number}
        for index, (protocol, number) in enumerate(node_ports)
    ]
    spec: dict[str, Any] = {"type": "LoadBalancer", "clusterIP": cluster_ip, "ports": ports}
    if health_check is not None:
        spec |= {"externalTrafficPolicy": "Local", "healthCheckNodePort": health_check}
    obj = svc(spec, name=name)
    if created is not None:
        obj["metadata"]["creationTimestamp"] = created
    return obj


def refusals(state: DesiredState, category: SkipReason) -> list[str]:
    return [f"{r.object}: {r.reason}" for r in state.rejections if r.category is category]


def health_check_entries(state: DesiredState) -> set[str]:
    return set(state.ipsets["KUBE-HEALTH-CHECK-NODE-PORT"].entries)


@pytest.mark.parametrize(
    ("number", "reason"),
    [
        (29999, "nodePort 29999 is outside --service-node-port-range 30000-32767"),
        (32768, "nodePort 32768 is outside --service-node-port-range 30000-32767"),
        (22, "nodePort 22 is outside --service-node-port-range 30000-32767"),
        (10250, "nodePort 10250 is a port this node serves itself (kubelet, health or metrics)"),
        (10256, "nodePort 10256 is a port this node serves itself (kubelet, health or metrics)"),
    ],
)
def test_a_node_port_outside_the_range_or_on_the_nodes_own_is_refused_alone(
    number: int, reason: str
) -> None:
    state = run([node_port("s", ("TCP", number), ("TCP", 30080))])
    assert vs("TCP", "192.168.0.1", number) not in state.virtual_servers
    assert vs("TCP", "192.168.0.1", 30080) in state.virtual_servers
    assert vs("TCP", "10.96.0.1", 80) in state.virtual_servers
    assert refusals(state, SkipReason.NODE_PORT_NOT_ALLOWED) == [f"Service ns/s: {reason}; ignored"]


def test_the_range_is_the_operators_and_the_nodes_own_ports_stay_refused_within_it() -> None:
    wide = Settings(node_port_range=(1, 65535), own_ports=frozenset({10250, 9100}))
    state = run([node_port("s", ("TCP", 22), ("TCP", 9100), ("TCP", 10256))], wide)
    assert vs("TCP", "192.168.0.1", 22) in state.virtual_servers
    assert vs("TCP", "192.168.0.1", 10256) in state.virtual_servers
    assert vs("TCP", "192.168.0.1", 9100) not in state.virtual_servers
    assert refusals(state, SkipReason.NODE_PORT_NOT_ALLOWED) == [
        "Service ns/s: nodePort 9100 is a port this node serves itself (kubelet, health or "
        "metrics); ignored"
    ]


@pytest.mark.parametrize("number", [20000, 10256])
def test_a_health_check_node_port_outside_the_range_or_on_the_nodes_own_is_not_served(
    number: int,
) -> None:
    state = run([node_port("s", ("TCP", 30080), health_check=number)])
    assert state.health_check_node_ports == {}
    assert health_check_entries(state) == set()
    [refused] = refusals(state, SkipReason.NODE_PORT_NOT_ALLOWED)
    assert refused.startswith(f"Service ns/s: healthCheckNodePort {number} is ")


def test_two_equal_health_check_node_ports_go_to_the_older_service_and_the_other_is_named() -> None:
    older = node_port("z-old", ("TCP", 30080), created=OLD, health_check=32000)
    newer = node_port(
        "a-new", ("TCP", 30081), created=NEW, health_check=32000, cluster_ip="10.96.0.2"
    )
    state = run([older, newer])
    assert state.health_check_node_ports == {ObjectKey("ns", "z-old"): 32000}
    assert health_check_entries(state) == {"32000"}
    assert refusals(state, SkipReason.ADDRESS_CONFLICT) == [
        "Service ns/a-new: node port TCP 32000 (healthCheckNodePort) is also Service "
        "ns/z-old's (healthCheckNodePort); ns/z-old keeps it, as the older service wins"
    ]
    # Only the health check is lost: the newer service's node port is served.
    assert vs("TCP", "192.168.0.1", 30081) in state.virtual_servers


def test_an_older_health_check_keeps_its_port_from_a_newer_node_port() -> None:
    """A virtual server there would answer the load balancer's health checks from the
    tenant's pods: the node port is refused, the health check served."""
    checked = node_port("checked", ("TCP", 30080), created=OLD, health_check=31000)
    taker = node_port("taker", ("TCP", 31000), ("UDP", 31000), created=NEW, cluster_ip="10.96.0.2")
    state = run([checked, taker])
    assert state.health_check_node_ports == {ObjectKey("ns", "checked"): 31000}
    assert vs("TCP", "192.168.0.1", 31000) not in state.virtual_servers
    # A health check is TCP: a UDP node port of the same number takes nothing from it.
    assert vs("UDP", "192.168.0.1", 31000) in state.virtual_servers
    assert refusals(state, SkipReason.ADDRESS_CONFLICT) == [
        "Service ns/taker: node port TCP 31000 (nodePort) is also Service ns/checked's "
        "(healthCheckNodePort); ns/checked keeps it, as the older service wins"
    ]


def test_an_older_node_port_keeps_its_port_from_a_newer_health_check() -> None:
    served = node_port("served", ("TCP", 31000), created=OLD)
    checked = node_port(
        "checked", ("TCP", 30080), created=NEW, health_check=31000, cluster_ip="10.96.0.2"
    )
    state = run([served, checked])
    assert state.health_check_node_ports == {}
    assert health_check_entries(state) == set()
    assert state.virtual_servers[vs("TCP", "192.168.0.1", 31000)].owner.service == ObjectKey(
        "ns", "served"
    )
    [lost] = refusals(state, SkipReason.ADDRESS_CONFLICT)
    assert lost.startswith("Service ns/checked: node port TCP 31000 (healthCheckNodePort)")


def test_a_health_check_on_the_services_own_tcp_node_port_is_refused() -> None:
    state = run([node_port("s", ("TCP", 31000), health_check=31000)])
    assert state.health_check_node_ports == {}
    assert vs("TCP", "192.168.0.1", 31000) in state.virtual_servers
    assert state.rejections == (
        Rejection(
            "Service ns/s",
            "healthCheckNodePort 31000 is also its TCP nodePort; ignored",
            SkipReason.ADDRESS_CONFLICT,
        ),
    )


def test_two_equal_node_ports_are_named_once_per_port_not_per_address() -> None:
    flags = Settings()
    state = run(
        [
            node_port("old", ("TCP", 30080), created=OLD),
            node_port("new", ("TCP", 30080), created=NEW, cluster_ip="10.96.0.2"),
        ],
        flags,
    )
    assert state.virtual_servers[vs("TCP", "192.168.0.1", 30080)].owner.service == ObjectKey(
        "ns", "old"
    )
    assert refusals(state, SkipReason.ADDRESS_CONFLICT) == [
        "Service ns/new: node port TCP 30080 (nodePort) is also Service ns/old's (nodePort); "
        "ns/old keeps it, as the older service wins"
    ]


@pytest.mark.parametrize("leaving", ["health check", "node port"])
def test_a_node_port_passes_to_the_other_service_when_its_holder_goes(leaving: str) -> None:
    """The incremental translation settles the port again, and with it the NodePort's
    virtual servers or the health check of the service that lost it before."""
    checked = node_port("checked", ("TCP", 30080), health_check=31000)
    taker = node_port("taker", ("TCP", 31000), cluster_ip="10.96.0.2")
    checked["metadata"]["creationTimestamp"] = OLD if leaving == "health check" else NEW
    taker["metadata"]["creationTimestamp"] = NEW if leaving == "health check" else OLD
    cluster = Cluster()
    cluster.apply(checked)
    cluster.apply(taker)
    incremental = IncrementalTranslation(Settings())
    incremental.rebuild(cluster.snapshot)

    gone = "checked" if leaving == "health check" else "taker"
    done = incremental.update(*cluster.apply(("Service", gone)))

    assert comparable(done.desired) == comparable(translate(cluster.snapshot, Settings()))
    assert not refusals(done.desired, SkipReason.ADDRESS_CONFLICT)
    if leaving == "health check":
        assert vs("TCP", "192.168.0.1", 31000) in done.change.virtual_servers
        assert vs("TCP", "192.168.0.1", 31000) in done.desired.virtual_servers
    else:
        assert done.desired.health_check_node_ports == {ObjectKey("ns", "checked"): 31000}
        assert done.change.added_entries["KUBE-HEALTH-CHECK-NODE-PORT"] == {"31000"}
