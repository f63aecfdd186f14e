"""Scenario 8: IPVS and kube-ipvs0 wiped behind the daemon's back come back within a sync period."""

from __future__ import annotations

from collections.abc import Callable

from tests.e2e.conftest import Cluster, Pods
from tests.e2e.steady.conftest import SYNC_PERIOD
from tests.lab.daemon import Daemon
from tests.lab.netns import Client, Pod, sh
from tests.lab.objects import cluster_ip, endpoint, endpoint_slice, port, service, slice_port
from tests.lab.traffic import wait_answered_by

DRIFT = "ipvsproxy_drift_repairs_total"
# A sync takes a few seconds inside the lab, on top of waiting for its turn.
SLACK = 30.0


def test_wiped_kernel_state_is_restored_and_counted(
    daemon: Daemon, cluster: Cluster, pods: Pods, client: Callable[[Pod | None], Client]
) -> None:
    backends = [pods(f"drift-{index}") for index in range(2)]
    caller = client(pods("drift-caller"))
    names = {b.name for b in backends}
    [stored, _] = cluster.apply(
        service("drift", [], [port(80)]),
        endpoint_slice("drift", [endpoint(str(b.ipv4)) for b in backends], [slice_port()]),
    )
    vip = cluster_ip(stored)
    wait_answered_by(caller, vip, 80, names)
    repairs_before = daemon.metrics().value(DRIFT)

    with daemon.refusals_expected():
        sh("ipvsadm", "-C")
        sh("ip", "addr", "flush", "dev", "kube-ipvs0")

        wait_answered_by(caller, vip, 80, names, timeout=SYNC_PERIOD + SLACK)
        daemon.wait_for_metric(DRIFT, repairs_before, SLACK)
