"""Scenario 5: a rolling update under load loses no request, and in-flight ones complete.

The EndpointSlices come from the real kube-controller-manager's EndpointSlice controller, out
of Pods selected by the Service. The test plays the kubelet: it writes each Pod running and
Ready, deletes it (without a kubelet to confirm its containers stopped, a deleted Pod stays
terminating: its endpoint not ready but still serving), and then removes it for good, as the
kubelet would once they had.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.e2e.conftest import Cluster, Pods
from tests.lab.apiserver import RealApiServer
from tests.lab.daemon import Daemon
from tests.lab.kernel_state import weights
from tests.lab.netns import Client, Pod
from tests.lab.objects import JsonObject, cluster_ip, pod, port, service
from tests.lab.traffic import APPLY_TIMEOUT, InFlight, LoadGenerator, wait_answered_by, wait_until

REPLICAS = 3
LABELS = {"app": "roll"}


def in_flight_on_each(caller: Client, vip: str, backends: list[Pod]) -> dict[str, InFlight]:
    """One open connection per backend (round-robin reaches each within a few tries)."""
    held: dict[str, InFlight] = {}
    for _ in range(4 * len(backends)):
        connection = InFlight(caller, vip, 80)
        if connection.backend in held:
            connection.complete()
        else:
            held[connection.backend] = connection
        if len(held) == len(backends):
            return held
    raise AssertionError(f"round-robin reached only {sorted(held)}")


def wait_for_weight(vip: str, backend: Pod, weight: int, meaning: str) -> None:
    wait_until(
        lambda: weights("-t", f"{vip}:80").get(f"{backend.ipv4}:8080") == weight,
        APPLY_TIMEOUT,
        f"{backend.name} {meaning}",
    )


def running(backend: Pod) -> JsonObject:
    """The API's Pod for a lab pod: on node-a, running and Ready at its addresses."""
    return pod(backend.name, LABELS, str(backend.ipv4), str(backend.ipv6))


def sliced_addresses(api: RealApiServer) -> set[str]:
    """The addresses the controller's EndpointSlices of "roll" hold now."""
    found = api.control_plane.request(
        "GET",
        "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"
        "?labelSelector=kubernetes.io/service-name=roll",
    )
    return {
        address
        for item in found["items"]
        for endpoint in item.get("endpoints") or []
        for address in endpoint["addresses"]
    }


def wait_unsliced(api: RealApiServer, backend: Pod) -> None:
    wait_until(
        lambda: str(backend.ipv4) not in sliced_addresses(api),
        APPLY_TIMEOUT,
        f"the controller takes {backend.name} out of the EndpointSlice",
    )


@pytest.mark.usefixtures("endpointslice_controller")
def test_replacing_pods_one_by_one_under_load_fails_no_request(
    daemon: Daemon,
    api: RealApiServer,
    cluster: Cluster,
    pods: Pods,
    client: Callable[[Pod | None], Client],
) -> None:
    old = [pods(f"roll-v1-{index}") for index in range(REPLICAS)]
    caller = client(pods("roll-caller"))
    [stored] = cluster.apply(service("roll", [], [port(80)], selector=LABELS))
    vip = cluster_ip(stored)
    api.apply(*(running(p) for p in old))
    wait_answered_by(caller, vip, 80, {p.name for p in old})
    held = in_flight_on_each(caller, vip, old)
    completed = {}
    new = []

    try:
        with LoadGenerator(caller, vip, 80) as load:
            for index, leaving in enumerate(old):
                arriving = pods(f"roll-v2-{index}")
                new.append(arriving)
                api.apply(running(arriving))
                wait_for_weight(vip, arriving, 1, "takes traffic")
                api.delete(running(leaving))
                wait_for_weight(vip, leaving, 0, "gets no new connection once terminating")
                api.delete(running(leaving), grace_seconds=0)
                wait_unsliced(api, leaving)
                daemon.wait_synced_since(time.time())
                completed[leaving.name] = held[leaving.name].complete()
                pods.remove(leaving)
                load.wait_for_requests(5)
        wait_answered_by(caller, vip, 80, {p.name for p in new})
    finally:
        api.delete(*(running(p) for p in old + new), grace_seconds=0)

    assert load.tally.failures == []
    assert load.tally.total > 3 * 5
    assert completed == {p.name: p.name for p in old}
