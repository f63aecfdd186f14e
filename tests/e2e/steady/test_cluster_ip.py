"""Scenario 1: a ClusterIP from the node and from a pod, round-robin over three pods."""

from __future__ import annotations

from collections.abc import Callable

from tests.e2e.conftest import Cluster, Pods
from tests.lab.netns import Client, Pod
from tests.lab.objects import endpoint, endpoint_slice, port, service, slice_port
from tests.lab.traffic import tcp_requests, wait_answered_by

VIP = "10.96.1.1"
REQUESTS = 300


def test_round_robin_gives_each_of_three_pods_a_fair_share(
    cluster: Cluster, pods: Pods, client: Callable[[Pod | None], Client]
) -> None:
    backends = [pods(f"rr-{index}") for index in range(3)]
    caller = pods("rr-caller")
    names = {backend.name for backend in backends}
    cluster.apply(
        service("rr", [VIP], [port(80)]),
        endpoint_slice("rr", [endpoint(str(b.ipv4)) for b in backends], [slice_port()]),
    )

    for where in (caller, None):
        wait_answered_by(client(where), VIP, 80, names)
        tally = tcp_requests(client(where), VIP, 80, REQUESTS)

        assert tally.failures == []
        assert set(tally.answers) == names
        assert min(tally.answers.values()) >= REQUESTS // 4, tally.answers
