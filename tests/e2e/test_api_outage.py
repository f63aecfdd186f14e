"""Scenario 7: the real API server goes away and comes back; traffic flows on throughout, and
what changed meanwhile lands after. And a compaction of etcd while the daemon watches.

While this API server is down, another one of the cluster would go on writing: the tests
delete objects in etcd itself, which is what a deletion is to the API server. Back up, the API
server's watch cache starts afresh, so a watch resuming from a version before it (the daemon's
EndpointSlice and Node watches) gets 410 Gone and relists. Services are watched from etcd's
own history instead (``--watch-cache-sizes=services#0``, see the e2e conftest): a Service
watch resumes where it stopped, unless a compaction removed that history meanwhile.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tests.e2e.conftest import Cluster, Pods
from tests.lab.apiserver import RealApiServer
from tests.lab.daemon import Daemon
from tests.lab.kernel_state import virtual_servers
from tests.lab.netns import Client, Pod
from tests.lab.objects import cluster_ip, endpoint, endpoint_slice, port, service, slice_port
from tests.lab.traffic import APPLY_TIMEOUT, LoadGenerator, wait_answered_by, wait_until

OUTAGE = 30.0
RELISTS = "ipvsproxy_relists_total"


def relists(daemon: Daemon) -> dict[str, float]:
    metrics = daemon.metrics()
    return {
        resource: metrics.value(RELISTS, resource=resource)
        for resource in ("services", "endpointslices")
    }


def wait_gone(vip: str, what: str) -> None:
    wait_until(
        lambda: not any(f"{vip}:" in line for line in virtual_servers()), APPLY_TIMEOUT, what
    )


def test_changes_made_during_an_outage_are_applied_after_it(
    daemon: Daemon,
    api: RealApiServer,
    cluster: Cluster,
    pods: Pods,
    client: Callable[[Pod | None], Client],
) -> None:
    doomed, kept, joining = pods("doomed"), pods("kept"), pods("joining")
    caller = client(pods("outage-caller"))
    doomed_objects = (
        service("doomed", [], [port(80)]),
        endpoint_slice("doomed", [endpoint(str(doomed.ipv4))], [slice_port()]),
    )
    stored = cluster.apply(
        *doomed_objects,
        service("kept", [], [port(80)]),
        endpoint_slice("kept", [endpoint(str(kept.ipv4))], [slice_port()]),
    )
    doomed_ip, kept_ip = cluster_ip(stored[0]), cluster_ip(stored[2])
    wait_answered_by(caller, doomed_ip, 80, {doomed.name})
    wait_answered_by(caller, kept_ip, 80, {kept.name})
    before = relists(daemon)

    with LoadGenerator(caller, kept_ip, 80) as load:
        with api.outage(OUTAGE):
            load.wait_for_requests(5)
            api.delete_in_storage(*doomed_objects)
        during = load.tally.total
        assert daemon.alive, daemon.log_tail()
        wait_gone(doomed_ip, "the service deleted during the outage leaves the kernel")
        cluster.apply(
            endpoint_slice("kept", [endpoint(str(p.ipv4)) for p in (kept, joining)], [slice_port()])
        )
        wait_answered_by(caller, kept_ip, 80, {kept.name, joining.name})

    assert during > 5
    assert load.tally.failures == []
    after = relists(daemon)
    # The EndpointSlice watch met the fresh watch cache; the Service watch resumed from etcd.
    assert after["endpointslices"] > before["endpointslices"]
    assert after["services"] == before["services"]


def test_a_compaction_while_watching_costs_nothing_until_the_watch_resumes(
    daemon: Daemon,
    api: RealApiServer,
    cluster: Cluster,
    pods: Pods,
    client: Callable[[Pod | None], Client],
) -> None:
    """A compaction leaves open watches alone; a Service watch resuming from a version a
    compaction removed gets 410 Gone from etcd, and what the relist brings is applied."""
    first, second = pods("compact-a"), pods("compact-b")
    caller = client(pods("compact-caller"))
    doomed = service("compact-doomed", [], [port(80)])
    stored = cluster.apply(
        service("compact", [], [port(80)]),
        endpoint_slice("compact", [endpoint(str(first.ipv4))], [slice_port()]),
        doomed,
        endpoint_slice("compact-doomed", [endpoint(str(first.ipv4))], [slice_port()]),
    )
    vip, doomed_ip = cluster_ip(stored[0]), cluster_ip(stored[2])
    wait_answered_by(caller, doomed_ip, 80, {first.name})
    before = relists(daemon)

    api.control_plane.compact()
    both = [endpoint(str(p.ipv4)) for p in (first, second)]
    cluster.apply(endpoint_slice("compact", both, [slice_port()]))
    wait_answered_by(caller, vip, 80, {first.name, second.name})
    daemon.wait_synced_since(time.time())
    assert relists(daemon) == before

    with LoadGenerator(caller, vip, 80) as load:
        with api.outage(0):
            api.delete_in_storage(doomed)
            # Past every version the watch can hold: a bookmark may have moved it beyond the
            # first compaction while the lab was slow.
            api.control_plane.compact()
        wait_gone(doomed_ip, "the service deleted while the API server restarted leaves the kernel")
        load.wait_for_requests(5)

    assert load.tally.failures == []
    assert relists(daemon)["services"] > before["services"]
