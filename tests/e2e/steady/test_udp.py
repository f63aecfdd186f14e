"""Scenario 9: a UDP client whose endpoint goes moves to a live pod instead of a black hole."""

from __future__ import annotations

import time
from collections.abc import Callable

from tests.e2e.conftest import Cluster, Pods
from tests.lab.daemon import Daemon
from tests.lab.kernel_state import weights
from tests.lab.netns import Client, Pod
from tests.lab.objects import cluster_ip, endpoint, endpoint_slice, port, service, slice_port
from tests.lab.traffic import APPLY_TIMEOUT, UdpConversation, wait_answered_by, wait_until


def test_datagrams_after_an_endpoint_goes_reach_a_live_pod(
    daemon: Daemon, cluster: Cluster, pods: Pods, client: Callable[[Pod | None], Client]
) -> None:
    backends = {name: pods(name) for name in ("udp-a", "udp-b")}
    caller = client(pods("udp-caller"))
    ports = [slice_port(8080, "UDP")]
    [stored, _] = cluster.apply(
        service("udp", [], [port(53, "UDP")]),
        endpoint_slice("udp", [endpoint(str(b.ipv4)) for b in backends.values()], ports),
    )
    vip = cluster_ip(stored)
    wait_answered_by(caller, vip, 53, set(backends), protocol="UDP")
    conversation = UdpConversation(caller, vip, 53)
    first = conversation.tally(3)
    assert first.failures == []
    assert len(first.answers) == 1, first.answers
    [used] = first.answers
    [live] = set(backends) - {used}

    cluster.apply(endpoint_slice("udp", [endpoint(str(backends[live].ipv4))], ports))
    pods.remove(backends[used])
    wait_until(
        lambda: f"{backends[used].ipv4}:8080" not in weights("-u", f"{vip}:53"),
        APPLY_TIMEOUT,
        f"{used} leaves the UDP service",
    )
    # The same sync flushes the flows to it after removing it: let that sync end.
    daemon.wait_synced_since(time.time())
    after = conversation.tally(5)
    conversation.close()

    assert after.failures == []
    assert after.answers == {live: 5}
