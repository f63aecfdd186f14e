"""Scenario 1: a ClusterIP from the node and from a pod, round-robin over three pods; and the
API server's own Service from a pod."""

from __future__ import annotations

import ssl
from collections.abc import Callable

from tests.controlplane.cluster import ADMIN_TOKEN, ControlPlane
from tests.e2e.conftest import Cluster, Pods
from tests.lab.apiserver import RealApiServer
from tests.lab.netns import Client, Pod
from tests.lab.objects import cluster_ip, endpoint, endpoint_slice, port, service, slice_port
from tests.lab.traffic import APPLY_TIMEOUT, tcp_requests, wait_answered_by, wait_until

REQUESTS = 300


def test_round_robin_gives_each_of_three_pods_a_fair_share(
    cluster: Cluster, pods: Pods, client: Callable[[Pod | None], Client]
) -> None:
    backends = [pods(f"rr-{index}") for index in range(3)]
    caller = pods("rr-caller")
    names = {backend.name for backend in backends}
    [stored, _] = cluster.apply(
        service("rr", [], [port(80)]),
        endpoint_slice("rr", [endpoint(str(b.ipv4)) for b in backends], [slice_port()]),
    )
    vip = cluster_ip(stored)

    for where in (caller, None):
        wait_answered_by(client(where), vip, 80, names)
        tally = tcp_requests(client(where), vip, 80, REQUESTS)

        assert tally.failures == []
        assert set(tally.answers) == names
        assert min(tally.answers.values()) >= REQUESTS // 4, tally.answers


def https_status(caller: Client, address: str, port: int, path: str, plane: ControlPlane) -> int:
    """One HTTPS GET as the admin, the server's certificate checked against the API server's."""
    context = ssl.create_default_context(cafile=str(plane.ca_file))
    with (
        caller.connect(address, port) as raw,
        context.wrap_socket(raw, server_hostname=address) as tls,
    ):
        tls.sendall(f"GET {path} HTTP/1.0\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\n\r\n".encode())
        reply = b""
        while chunk := tls.recv(65536):
            reply += chunk
    return int(reply.split()[1])


def test_a_pod_reaches_the_api_server_through_the_kubernetes_service(
    api: RealApiServer, pods: Pods, client: Callable[[Pod | None], Client]
) -> None:
    """The Service the API server keeps for itself, its endpoint the address it advertises:
    as a pod in a cluster reaches it (its certificate names the Service's cluster IP)."""
    caller = client(pods("kube-api-caller"))
    kubernetes = api.get({"kind": "Service", "metadata": {"name": "kubernetes"}})
    vip = cluster_ip(kubernetes)

    status = wait_until(
        lambda: _status_or_zero(caller, vip, api.control_plane),
        APPLY_TIMEOUT,
        f"the kubernetes Service at {vip}:443 answers",
    )

    assert status == 200


def _status_or_zero(caller: Client, vip: str, plane: ControlPlane) -> int:
    try:
        return https_status(caller, vip, 443, "/readyz", plane)
    except OSError:
        return 0
