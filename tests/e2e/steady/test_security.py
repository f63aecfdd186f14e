"""Scenario 13, from kube-proxy's history: host ports behind service IPs (#72236), and
loadBalancerSourceRanges enforced for pods and outside clients alike."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from tests.e2e.conftest import Cluster, Pods
from tests.lab.daemon import Daemon
from tests.lab.netns import Client, Node, Pod, serve_names, stop_servers
from tests.lab.objects import cluster_ip, endpoint, endpoint_slice, port, service, slice_port
from tests.lab.traffic import tcp_requests, wait_answered_by

HOST_PORT = 7013
EXTERNAL_IP = "10.99.13.2"
LOAD_BALANCER_IP = "10.99.13.3"
FENCED_IP = "10.99.13.10"
# A refused or dropped connection shows within this; an accepted one answers at once.
REFUSAL_TIMEOUT = 2.0


@pytest.fixture
def host_server() -> Iterator[str]:
    """A server on the node's 0.0.0.0 (and ::) at a port no Service uses."""
    servers = serve_names("node-local", HOST_PORT)
    yield "node-local"
    stop_servers(servers)


def test_a_node_port_outside_every_service_is_not_reachable_through_service_ips(
    node: Node,
    cluster: Cluster,
    pods: Pods,
    client: Callable[[Pod | None], Client],
    host_server: str,
) -> None:
    backend = pods("guarded")
    callers = [pods("guard-caller"), pods.outside("guard-outside")]
    [stored, _] = cluster.apply(
        service(
            "guarded",
            [],
            [port(80)],
            service_type="LoadBalancer",
            ingress_ips=(LOAD_BALANCER_IP,),
            externalIPs=[EXTERNAL_IP],
        ),
        endpoint_slice("guarded", [endpoint(str(backend.ipv4))], [slice_port()]),
    )

    for caller in callers:
        patient, impatient = client(caller), Client(caller.namespace, timeout=REFUSAL_TIMEOUT)
        # The host server answers on the node's own address: its silence below is the filter's.
        assert tcp_requests(patient, str(node.ipv4), HOST_PORT, 1).answers == {host_server: 1}
        for address in (cluster_ip(stored), EXTERNAL_IP, LOAD_BALANCER_IP):
            wait_answered_by(patient, address, 80, {backend.name})
            leaked = tcp_requests(impatient, address, HOST_PORT, 1)
            assert leaked.answers == {}, (caller.name, address)


def test_load_balancer_source_ranges_admit_only_listed_clients(
    daemon: Daemon, cluster: Cluster, pods: Pods, client: Callable[[Pod | None], Client]
) -> None:
    backend = pods("fenced")
    admitted = [pods("fence-pod-in"), pods.outside("fence-out-in")]
    refused = [pods("fence-pod-out"), pods.outside("fence-out-out")]
    cluster.apply(
        service(
            "fenced",
            [],
            [port(80)],
            service_type="LoadBalancer",
            ingress_ips=(FENCED_IP,),
            loadBalancerSourceRanges=[f"{p.ipv4}/32" for p in admitted],
        ),
        endpoint_slice("fenced", [endpoint(str(backend.ipv4))], [slice_port()]),
    )
    for caller in admitted:
        wait_answered_by(client(caller), FENCED_IP, 80, {backend.name})
    # The firewall rules come in the same sync as the virtual server: let that sync finish.
    daemon.wait_synced_since(time.time())

    for caller in admitted:
        tally = tcp_requests(client(caller), FENCED_IP, 80, 5)
        assert tally.answers == {backend.name: 5}, caller.name
    for caller in refused:
        tally = tcp_requests(Client(caller.namespace, timeout=REFUSAL_TIMEOUT), FENCED_IP, 80, 2)
        assert tally.answers == {}, caller.name
