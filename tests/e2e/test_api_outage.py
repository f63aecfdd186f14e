"""Scenario 7: a 30 s API server outage: traffic flows on; what changed meanwhile lands after."""

from __future__ import annotations

from collections.abc import Callable

from tests.e2e.conftest import Cluster, Pods
from tests.lab.apiserver import LabApiServer
from tests.lab.daemon import Daemon
from tests.lab.kernel_state import virtual_servers
from tests.lab.netns import Client, Pod
from tests.lab.objects import endpoint, endpoint_slice, port, service, slice_port
from tests.lab.traffic import APPLY_TIMEOUT, LoadGenerator, wait_answered_by, wait_until

OUTAGE = 30.0
DOOMED_IP = "10.96.7.1"
KEPT_IP = "10.96.7.2"
RELISTS = "ipvsproxy_relists_total"


def test_changes_made_during_an_outage_are_applied_after_it(
    daemon: Daemon,
    api: LabApiServer,
    cluster: Cluster,
    pods: Pods,
    client: Callable[[Pod | None], Client],
) -> None:
    doomed, kept, joining = pods("doomed"), pods("kept"), pods("joining")
    caller = client(pods("outage-caller"))
    doomed_objects = (
        service("doomed", [DOOMED_IP], [port(80)]),
        endpoint_slice("doomed", [endpoint(str(doomed.ipv4))], [slice_port()]),
    )
    cluster.apply(
        *doomed_objects,
        service("kept", [KEPT_IP], [port(80)]),
        endpoint_slice("kept", [endpoint(str(kept.ipv4))], [slice_port()]),
    )
    wait_answered_by(caller, DOOMED_IP, 80, {doomed.name})
    wait_answered_by(caller, KEPT_IP, 80, {kept.name})
    relists_before = daemon.metrics().value(RELISTS)

    with LoadGenerator(caller, KEPT_IP, 80) as load:
        # The history is compacted meanwhile: the deletion can only be learnt by relisting.
        with api.outage(OUTAGE, forget_history=True):
            load.wait_for_requests(5)
            cluster.delete(*doomed_objects)
            cluster.apply(
                endpoint_slice(
                    "kept", [endpoint(str(p.ipv4)) for p in (kept, joining)], [slice_port()]
                )
            )
        during = load.tally.total
        assert daemon.alive, daemon.log_tail()
        wait_until(
            lambda: not any(DOOMED_IP in line for line in virtual_servers()),
            APPLY_TIMEOUT,
            "the service deleted during the outage leaves the kernel",
        )
        wait_answered_by(caller, KEPT_IP, 80, {kept.name, joining.name}, APPLY_TIMEOUT)

    assert during > 5
    assert load.tally.failures == []
    assert daemon.metrics().value(RELISTS) > relists_before
