"""Scenarios 6 and 12: restarts under load change nothing; cleanup then leaves nothing of ours.

One daemon for the module, restarted by the tests themselves.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable

from tests.e2e.conftest import Cluster, Pods
from tests.lab.daemon import Daemon
from tests.lab.kernel_state import (
    ipvs_table,
    kube_chains,
    kube_ipsets,
    link_addresses,
    virtual_servers,
)
from tests.lab.netns import Client, Node, Pod
from tests.lab.objects import cluster_ip, endpoint, endpoint_slice, port, service, slice_port
from tests.lab.traffic import LoadGenerator, wait_answered_by

KUBE_IPVS0 = "kube-ipvs0"


def kernel_tables() -> tuple[set[str], set[str] | None]:
    """What a restart must leave as it was: IPVS (without counters) and kube-ipvs0's addresses."""
    return ipvs_table(), link_addresses(KUBE_IPVS0)


def test_restarts_under_load_fail_no_request_and_change_no_table(
    daemon: Daemon, node: Node, cluster: Cluster, pods: Pods, client: Callable[[Pod | None], Client]
) -> None:
    backends = [pods(f"restart-{index}") for index in range(3)]
    caller = client(pods("restart-caller"))
    names = {b.name for b in backends}
    [stored, _] = cluster.apply(
        service("restart", [], [port(80)], service_type="NodePort"),
        endpoint_slice("restart", [endpoint(str(b.ipv4)) for b in backends], [slice_port()]),
    )
    vip = cluster_ip(stored)
    wait_answered_by(caller, vip, 80, names)
    before = kernel_tables()

    with LoadGenerator(caller, vip, 80) as load:
        load.wait_for_requests(10)
        statuses = []
        for sig in (signal.SIGTERM, signal.SIGKILL):
            statuses.append(daemon.stop(sig))
            load.wait_for_requests(5)
            daemon.start()
            assert kernel_tables() == before, f"after {sig.name}"
            load.wait_for_requests(5)

    assert statuses == [0, -signal.SIGKILL]
    assert load.tally.failures == []
    assert set(load.tally.answers) == names


def test_cleanup_after_the_daemon_leaves_nothing_of_ours(
    daemon: Daemon, node: Node, cluster: Cluster, pods: Pods, client: Callable[[Pod | None], Client]
) -> None:
    """Every kind of object the daemon makes, then ``ipvsproxy cleanup`` as an operator runs it."""
    if not daemon.alive:  # the restart scenario failed half-way: do not fail twice for it
        daemon.start()
    backend = pods("leftover")
    caller = client(pods("leftover-caller"))
    [stored, _] = cluster.apply(
        service(
            "leftover",
            [],
            [port(80, name="http"), port(53, "UDP", name="dns")],
            service_type="LoadBalancer",
            ingress_ips=("10.99.12.1",),
            externalIPs=["10.99.12.2"],
            loadBalancerSourceRanges=[f"{node.ipv4}/32", "10.244.0.0/16"],
            externalTrafficPolicy="Local",
            sessionAffinity="ClientIP",
        ),
        endpoint_slice(
            "leftover",
            [endpoint(str(backend.ipv4))],
            [slice_port(name="http"), slice_port(8080, "UDP", "dns")],
        ),
    )
    wait_answered_by(caller, cluster_ip(stored), 80, {backend.name})
    assert daemon.stop(signal.SIGTERM) == 0

    cleaned = subprocess.run(
        [sys.executable, "-m", "ipvsproxy", "cleanup"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )

    assert cleaned.returncode == 0, cleaned.stdout + cleaned.stderr
    assert virtual_servers() == set()
    assert link_addresses(KUBE_IPVS0) is None
    assert kube_chains() == set()
    assert kube_ipsets() == set()
