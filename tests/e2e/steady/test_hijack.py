"""Scenario 15: a Service claiming the DNS service's cluster IP as an externalIP changes nothing."""

from __future__ import annotations

import time
from collections.abc import Callable

from tests.e2e.conftest import Cluster, Pods
from tests.lab.daemon import Daemon
from tests.lab.netns import Client, Pod
from tests.lab.objects import cluster_ip, endpoint, endpoint_slice, port, service, slice_port
from tests.lab.traffic import LoadGenerator, udp_requests, wait_answered_by

SKIPPED = "ipvsproxy_objects_skipped_total"


def dns_ports() -> list[dict[str, object]]:
    return [port(53, "UDP", target=53, name="dns"), port(53, target=53, name="dns-tcp")]


def dns_slice_ports() -> list[dict[str, object]]:
    return [slice_port(53, "UDP", "dns"), slice_port(53, "TCP", "dns-tcp")]


def test_dns_keeps_answering_while_another_namespace_claims_its_address(
    daemon: Daemon, cluster: Cluster, pods: Pods, client: Callable[[Pod | None], Client]
) -> None:
    dns = [pods(f"dns-{index}", 53) for index in range(2)]
    thief = pods("thief", 53)
    caller = client(pods("dns-caller"))
    names = {p.name for p in dns}
    [dns_service, _] = cluster.apply(
        service("kube-dns", [], dns_ports(), namespace="kube-system"),
        endpoint_slice(
            "kube-dns",
            [endpoint(str(p.ipv4)) for p in dns],
            dns_slice_ports(),
            namespace="kube-system",
        ),
    )
    dns_ip = cluster_ip(dns_service)
    wait_answered_by(caller, dns_ip, 53, names)
    wait_answered_by(caller, dns_ip, 53, names, protocol="UDP")
    skipped_before = daemon.metrics().value(SKIPPED)

    with LoadGenerator(caller, dns_ip, 53) as load:
        # "attacker" sorts before "kube-system": first come must not mean first served.
        cluster.apply(
            service("grab", [], dns_ports(), namespace="attacker", externalIPs=[dns_ip]),
            endpoint_slice(
                "grab", [endpoint(str(thief.ipv4))], dns_slice_ports(), namespace="attacker"
            ),
        )
        # Counted as a conflict: the daemon has seen it; then let the sync that did end.
        daemon.wait_for_metric(SKIPPED, skipped_before)
        daemon.wait_synced_since(time.time())
        load.wait_for_requests(10)
        udp = udp_requests(caller, dns_ip, 53, 10)

    assert load.tally.failures == []
    assert set(load.tally.answers) == names
    assert udp.failures == []
    assert set(udp.answers) <= names
    assert "attacker/grab" in daemon.log()
