"""Scenario 10: IPv6-only and dual-stack ClusterIP services answer on both families."""

from __future__ import annotations

from collections.abc import Callable

from tests.e2e.conftest import Cluster, Pods
from tests.lab.netns import Client, Pod
from tests.lab.objects import endpoint, endpoint_slice, port, service, slice_port
from tests.lab.traffic import tcp_requests, wait_answered_by


def test_ipv6_and_dual_stack_services_answer_on_every_family(
    cluster: Cluster, pods: Pods, client: Callable[[Pod | None], Client]
) -> None:
    backends = [pods(f"ds-{index}") for index in range(2)]
    caller = pods("ds-caller")
    names = {b.name for b in backends}
    v4 = [endpoint(str(b.ipv4)) for b in backends]
    v6 = [endpoint(str(b.ipv6)) for b in backends]
    [v6_only, _, dual, _, _] = cluster.apply(
        service("v6", [], [port(80)], families=("IPv6",)),
        endpoint_slice("v6", v6, [slice_port()], address_type="IPv6"),
        service("ds", [], [port(80)], families=("IPv4", "IPv6")),
        endpoint_slice("ds", v4, [slice_port()]),
        endpoint_slice("ds", v6, [slice_port()], address_type="IPv6"),
    )
    addresses = [*v6_only["spec"]["clusterIPs"], *dual["spec"]["clusterIPs"]]
    assert len(addresses) == 3, addresses

    for where in (caller, None):
        for address in addresses:
            wait_answered_by(client(where), address, 80, names)
            tally = tcp_requests(client(where), address, 80, 10)
            assert tally.failures == [], (where, address)
            assert set(tally.answers) == names, (where, address)
