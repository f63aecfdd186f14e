"""Scenario 14: how long a new Service takes to answer with 1,000 services programmed.

The figure is reported, never judged; the test checks that the traffic came and that the
daemon's own network-programming histogram recorded the change.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest

from tests.e2e.conftest import Cluster, Pods, running_daemon
from tests.lab.apiserver import LabApiServer
from tests.lab.daemon import Daemon
from tests.lab.netns import Client, Pod
from tests.lab.objects import JsonObject, endpoint, endpoint_slice, port, service, slice_port
from tests.lab.traffic import APPLY_TIMEOUT, tcp_requests, wait_until

SERVICES = 1000
# Programming 1,000 services crosses UML's slow netlink path a few thousand times.
FIRST_SYNC_TIMEOUT = 300.0
PROGRAMMING = "kubeproxy_network_programming_duration_seconds_count"
VIP = "10.96.14.1"
# Endpoints of the bulk services: no pod answers there, nothing sends to them.
BULK_ENDPOINT = "10.244.200.1"


def bulk_objects() -> list[JsonObject]:
    objects = []
    for index in range(SERVICES):
        name = f"bulk-{index}"
        address = f"10.97.{index // 250}.{index % 250 + 1}"
        objects += [
            service(name, [address], [port(80)], namespace="bulk"),
            endpoint_slice(name, [endpoint(BULK_ENDPOINT)], [slice_port()], namespace="bulk"),
        ]
    return objects


@pytest.fixture(scope="module")
def bulk(api: LabApiServer) -> Iterator[None]:
    objects = bulk_objects()
    api.apply(*objects)
    yield
    api.delete(*objects)


@pytest.fixture(scope="module")
def daemon(
    bulk: None, api: LabApiServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Daemon]:
    directory = tmp_path_factory.mktemp("daemon")
    with running_daemon(api, directory, start_timeout=FIRST_SYNC_TIMEOUT) as running:
        yield running


def test_a_new_service_answers_and_its_programming_latency_is_recorded(
    daemon: Daemon,
    cluster: Cluster,
    pods: Pods,
    client: Callable[[Pod | None], Client],
    capsys: pytest.CaptureFixture[str],
) -> None:
    backend = pods("fresh")
    probe = Client(None, timeout=1.0)
    recorded_before = daemon.metrics().value(PROGRAMMING)

    changed_at = datetime.now(UTC)
    started = time.monotonic()
    cluster.apply(
        service("fresh", [VIP], [port(80)]),
        endpoint_slice(
            "fresh", [endpoint(str(backend.ipv4))], [slice_port()], changed_at=changed_at
        ),
    )
    wait_until(
        lambda: tcp_requests(probe, VIP, 80, 1).answers == {backend.name: 1},
        APPLY_TIMEOUT,
        "the new service answers",
    )
    latency = time.monotonic() - started

    with capsys.disabled():
        print(
            f"\ne2e: a new Service answered {latency:.2f} s after it was created, "
            f"with {SERVICES} services programmed (inside the lab)"
        )
    assert tcp_requests(client(None), VIP, 80, 5).answers == {backend.name: 5}
    daemon.wait_for_metric(PROGRAMMING, recorded_before)
