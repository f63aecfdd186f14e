"""Scenario 3: sessionAffinity ClientIP keeps one client on one pod."""

from __future__ import annotations

from collections.abc import Callable

from tests.e2e.conftest import Cluster, Pods
from tests.lab.kernel_state import weights
from tests.lab.netns import Client, Pod
from tests.lab.objects import cluster_ip, endpoint, endpoint_slice, port, service, slice_port
from tests.lab.traffic import APPLY_TIMEOUT, tcp_requests, wait_until


def test_client_ip_affinity_sends_all_requests_of_a_client_to_one_pod(
    cluster: Cluster, pods: Pods, client: Callable[[Pod | None], Client]
) -> None:
    backends = [pods(f"aff-{index}") for index in range(3)]
    caller = client(pods("aff-caller"))
    [stored, _] = cluster.apply(
        service(
            "aff",
            [],
            [port(80)],
            sessionAffinity="ClientIP",
            sessionAffinityConfig={"clientIP": {"timeoutSeconds": 600}},
        ),
        endpoint_slice("aff", [endpoint(str(b.ipv4)) for b in backends], [slice_port()]),
    )
    vip = cluster_ip(stored)
    # All three pods are in the table, so one answering pod is the affinity, not a lone pod.
    wait_until(
        lambda: len(weights("-t", f"{vip}:80")) == 3, APPLY_TIMEOUT, "three real servers on the VIP"
    )

    tally = tcp_requests(caller, vip, 80, 50)

    assert tally.failures == []
    assert len(tally.answers) == 1, tally.answers
    assert set(tally.answers) <= {b.name for b in backends}
