"""A tenant's Service written to reach the node or another node (CVE-2020-8554): its
externalIPs and load-balancer IPs on a Node's address are refused, and the node's own
listeners, and the other node, keep answering."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.e2e.conftest import Cluster, Pods
from tests.lab.daemon import Daemon
from tests.lab.kernel_state import link_addresses, virtual_servers
from tests.lab.netns import Client, Node, Pod, serve_names, stop_servers
from tests.lab.objects import (
    JsonObject,
    cluster_ip,
    endpoint,
    endpoint_slice,
    port,
    service,
    slice_port,
)
from tests.lab.objects import node as node_object
from tests.lab.traffic import tcp_requests, wait_answered_by

# sshd's, the kubelet's and kube-proxy's health port: what a tenant would want of a node.
NODE_PORTS = (22, 10250, 10256)
# The API server's and the kubelet's, on another node.
OTHER_NODE_PORTS = (6443, 10250)
OTHER_NODE_IP = "10.240.0.12"
SKIPPED = "ipvsproxy_objects_skipped_total"


@pytest.fixture
def node_listeners() -> Iterator[str]:
    """Servers of the node's own on every address, at the ports a tenant goes for."""
    servers = [server for number in NODE_PORTS for server in serve_names("the-node", number)]
    yield "the-node"
    stop_servers(servers)


def tenant_service(
    name: str, ports: tuple[int, ...], backend: Pod, **spec: Any
) -> tuple[JsonObject, JsonObject]:
    return (
        service(name, [], [port(n, target=n, name=f"p{n}") for n in ports], **spec),
        endpoint_slice(
            name, [endpoint(str(backend.ipv4))], [slice_port(n, name=f"p{n}") for n in ports]
        ),
    )


def test_external_ips_on_this_node_leave_its_own_ports_to_it(
    daemon: Daemon,
    node: Node,
    cluster: Cluster,
    pods: Pods,
    node_listeners: str,
) -> None:
    tenant = pods("tenant", *NODE_PORTS)
    callers = [Client(pods("np-caller").namespace), Client(pods.outside("np-outsider").namespace)]
    callers.append(Client(None))
    skipped = daemon.metrics().value(SKIPPED, reason="node_address")
    [stored, _] = cluster.apply(
        *tenant_service("tenant", NODE_PORTS, tenant, externalIPs=[str(node.ipv4)])
    )
    # The rest of the Service is served: the daemon has taken it in.
    wait_answered_by(callers[0], cluster_ip(stored), 22, {tenant.name})
    daemon.wait_for_metric(SKIPPED, skipped, reason="node_address")
    daemon.wait_synced_since(time.time())

    assert not [line for line in virtual_servers() if f" {node.ipv4}:" in line]
    for caller in callers:
        for number in NODE_PORTS:
            tally = tcp_requests(caller, str(node.ipv4), number, 3)
            assert tally.answers == {node_listeners: 3}, (caller.namespace, number, tally)
    assert (
        f"skipped Service default/tenant: externalIP {node.ipv4} is this node's address; ignored"
        in daemon.log()
    )


def test_a_service_on_another_nodes_address_leaves_that_node_reachable(
    daemon: Daemon, cluster: Cluster, pods: Pods, client: Callable[[Pod | None], Client]
) -> None:
    other = pods.at("node-c", OTHER_NODE_IP, *OTHER_NODE_PORTS)
    cluster.apply(node_object("node-c", OTHER_NODE_IP))
    daemon.wait_synced_since(time.time())
    tenant = pods("tenant-c", *OTHER_NODE_PORTS)
    callers = [client(pods("other-caller")), client(None)]
    skipped = daemon.metrics().value(SKIPPED, reason="node_address")
    [stored, _] = cluster.apply(
        *tenant_service(
            "tenant-c",
            OTHER_NODE_PORTS,
            tenant,
            service_type="LoadBalancer",
            ingress_ips=(OTHER_NODE_IP,),
            externalIPs=[OTHER_NODE_IP],
        )
    )
    wait_answered_by(callers[0], cluster_ip(stored), 6443, {tenant.name})
    # Both the external IP and the ingress IP are refused.
    daemon.wait_for_metric(SKIPPED, skipped + 1, reason="node_address")
    daemon.wait_synced_since(time.time())

    assert f"{OTHER_NODE_IP}/32" not in (link_addresses("kube-ipvs0") or set())
    assert not [line for line in virtual_servers() if f" {OTHER_NODE_IP}:" in line]
    for caller in callers:
        for number in OTHER_NODE_PORTS:
            tally = tcp_requests(caller, OTHER_NODE_IP, number, 3)
            assert tally.answers == {other.name: 3}, (caller.namespace, number, tally)
    assert f"externalIP {OTHER_NODE_IP} is Node node-c's address; ignored" in daemon.log()
