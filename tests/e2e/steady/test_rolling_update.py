"""Scenario 5: a rolling update under load loses no request, and in-flight ones complete."""

from __future__ import annotations

import time
from collections.abc import Callable

from tests.e2e.conftest import Cluster, Pods
from tests.lab.daemon import Daemon
from tests.lab.kernel_state import weights
from tests.lab.netns import Client, Pod
from tests.lab.objects import JsonObject, endpoint, endpoint_slice, port, service, slice_port
from tests.lab.traffic import APPLY_TIMEOUT, InFlight, LoadGenerator, wait_answered_by, wait_until

VIP = "10.96.5.1"
REPLICAS = 3


def in_flight_on_each(caller: Client, backends: list[Pod]) -> dict[str, InFlight]:
    """One open connection per backend (round-robin reaches each within a few tries)."""
    held: dict[str, InFlight] = {}
    for _ in range(4 * len(backends)):
        connection = InFlight(caller, VIP, 80)
        if connection.backend in held:
            connection.complete()
        else:
            held[connection.backend] = connection
        if len(held) == len(backends):
            return held
    raise AssertionError(f"round-robin reached only {sorted(held)}")


def wait_for_weight(backend: Pod, weight: int, meaning: str) -> None:
    wait_until(
        lambda: weights("-t", f"{VIP}:80").get(f"{backend.ipv4}:8080") == weight,
        APPLY_TIMEOUT,
        f"{backend.name} {meaning}",
    )


def test_replacing_pods_one_by_one_under_load_fails_no_request(
    daemon: Daemon, cluster: Cluster, pods: Pods, client: Callable[[Pod | None], Client]
) -> None:
    old = [pods(f"roll-v1-{index}") for index in range(REPLICAS)]
    caller = client(pods("roll-caller"))
    serving: dict[str, JsonObject] = {p.name: endpoint(str(p.ipv4)) for p in old}

    def publish() -> float:
        cluster.apply(endpoint_slice("roll", list(serving.values()), [slice_port()]))
        return time.time()

    cluster.apply(service("roll", [VIP], [port(80)]))
    publish()
    wait_answered_by(caller, VIP, 80, {p.name for p in old})
    held = in_flight_on_each(caller, old)
    completed = {}
    new = []

    with LoadGenerator(caller, VIP, 80) as load:
        for index, leaving in enumerate(old):
            arriving = pods(f"roll-v2-{index}")
            new.append(arriving)
            serving[arriving.name] = endpoint(str(arriving.ipv4))
            publish()
            wait_for_weight(arriving, 1, "takes traffic")
            serving[leaving.name] = endpoint(
                str(leaving.ipv4), ready=False, serving=True, terminating=True
            )
            publish()
            wait_for_weight(leaving, 0, "gets no new connection once terminating")
            del serving[leaving.name]
            daemon.wait_synced_since(publish())
            completed[leaving.name] = held[leaving.name].complete()
            pods.remove(leaving)
            load.wait_for_requests(5)

    assert load.tally.failures == []
    assert load.tally.total > 3 * 5
    assert completed == {p.name: p.name for p in old}
    wait_answered_by(caller, VIP, 80, {p.name for p in new})
