"""Scenarios 2, 4 and 16: NodePorts from outside the pod network, and the Local traffic policy."""

from __future__ import annotations

from collections.abc import Callable

from tests.e2e.conftest import Cluster, Pods
from tests.lab.netns import Client, Node, Pod
from tests.lab.objects import (
    JsonObject,
    endpoint,
    endpoint_slice,
    node_port,
    port,
    service,
    slice_port,
)
from tests.lab.traffic import APPLY_TIMEOUT, http_get, tcp_requests, wait_answered_by, wait_until


def test_node_port_serves_a_client_outside_the_pod_network(
    node: Node,
    cluster: Cluster,
    pods: Pods,
    client: Callable[[Pod | None], Client],
) -> None:
    backends = [pods(f"np-{index}") for index in range(2)]
    outside = client(pods.outside("np-outside"))
    names = {backend.name for backend in backends}
    [stored, _] = cluster.apply(
        service("np", [], [port(80)], service_type="NodePort"),
        endpoint_slice("np", [endpoint(str(b.ipv4)) for b in backends], [slice_port()]),
    )
    allocated = node_port(stored)

    wait_answered_by(outside, str(node.ipv4), allocated, names)
    tally = tcp_requests(outside, str(node.ipv4), allocated, 40)

    assert tally.failures == []
    assert set(tally.answers) == names


def local_service(name: str, lb_ip: str) -> JsonObject:
    """A LoadBalancer service with externalTrafficPolicy Local (the API server allocates its
    node port and health-check node port)."""
    return service(
        name,
        [],
        [port(80)],
        service_type="LoadBalancer",
        ingress_ips=(lb_ip,),
        externalTrafficPolicy="Local",
    )


def health_port(stored: JsonObject) -> int:
    number: int = stored["spec"]["healthCheckNodePort"]
    return number


def test_local_policy_reaches_only_local_pods_and_health_follows_them(
    node: Node,
    cluster: Cluster,
    pods: Pods,
    client: Callable[[Pod | None], Client],
) -> None:
    local = [pods(f"etp-a{index}") for index in range(2)]
    remote = [pods(f"etp-b{index}") for index in range(2)]
    outside = client(pods.outside("etp-outside"))
    on_node = client(None)
    endpoints = [endpoint(str(p.ipv4), "node-a") for p in local]
    endpoints += [endpoint(str(p.ipv4), "node-b") for p in remote]
    [stored, _] = cluster.apply(
        local_service("etp", "10.99.4.1"),
        endpoint_slice("etp", endpoints, [slice_port()]),
    )
    local_names = {p.name for p in local}

    wait_answered_by(outside, str(node.ipv4), node_port(stored), local_names)
    tally = tcp_requests(outside, str(node.ipv4), node_port(stored), 30)
    health = http_get(on_node, str(node.ipv4), health_port(stored), "/")

    assert tally.failures == []
    assert set(tally.answers) == local_names
    assert health.status == 200, health
    assert health.json() == {
        "service": {"namespace": "default", "name": "etp"},
        "localEndpoints": 2,
    }

    cluster.apply(endpoint_slice("etp", endpoints[2:], [slice_port()]))

    wait_until(
        lambda: http_get(on_node, str(node.ipv4), health_port(stored), "/").status == 503,
        APPLY_TIMEOUT,
        "the health-check node port answers 503 once node-a has no endpoint",
    )


def test_local_policy_without_local_endpoints_still_serves_pods_on_the_node(
    node: Node,
    cluster: Cluster,
    pods: Pods,
    client: Callable[[Pod | None], Client],
) -> None:
    remote = [pods(f"etp16-b{index}") for index in range(2)]
    caller = client(pods("etp16-caller"))
    names = {p.name for p in remote}
    [stored, _] = cluster.apply(
        local_service("etp16", "10.99.16.1"),
        endpoint_slice("etp16", [endpoint(str(p.ipv4), "node-b") for p in remote], [slice_port()]),
    )

    for address, service_port in ((str(node.ipv4), node_port(stored)), ("10.99.16.1", 80)):
        wait_answered_by(caller, address, service_port, names)
        tally = tcp_requests(caller, address, service_port, 10)
        assert tally.failures == []
        assert set(tally.answers) == names
    health = http_get(client(None), str(node.ipv4), health_port(stored), "/")
    assert health.status == 503, health
