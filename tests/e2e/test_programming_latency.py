"""Scenario 14: how long a new Service takes to answer with 1,000 services programmed.

The figure is reported, never judged; the test checks that the traffic came and that the
daemon's own network-programming histogram recorded the change.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import pytest

from tests.e2e.conftest import Cluster, Pods, running_daemon
from tests.lab.apiserver import RealApiServer
from tests.lab.daemon import Daemon
from tests.lab.netns import Client, Pod
from tests.lab.objects import (
    JsonObject,
    cluster_ip,
    endpoint,
    endpoint_slice,
    port,
    service,
    slice_port,
)
from tests.lab.traffic import APPLY_TIMEOUT, tcp_requests, wait_until

SERVICES = 1000
# Programming 1,000 services crosses UML's slow netlink path a few thousand times.
FIRST_SYNC_TIMEOUT = 300.0
PROGRAMMING = "kubeproxy_network_programming_duration_seconds_count"
# Endpoints of the bulk services: no pod answers there, nothing sends to them.
BULK_ENDPOINT = "10.244.200.1"
WRITERS = 8


def bulk_objects() -> list[JsonObject]:
    objects = []
    for index in range(SERVICES):
        name = f"bulk-{index}"
        objects += [
            service(name, [], [port(80)], namespace="bulk"),
            endpoint_slice(name, [endpoint(BULK_ENDPOINT)], [slice_port()], namespace="bulk"),
        ]
    return objects


@pytest.fixture(scope="module")
def bulk(api: RealApiServer) -> Iterator[None]:
    """Written through the API, several at a time: each write crosses the whole API server in
    the lab (a Service's took 250 ms on a loaded host, its cluster IP being an object of its
    own). Deleted in etcd, once the daemon is gone: what the API server does to delete them,
    at a fraction of the cost (its repair loop frees the cluster IPs they leave behind)."""
    objects = bulk_objects()
    with ThreadPoolExecutor(WRITERS) as pool:
        list(pool.map(api.apply, objects))
    yield
    api.delete_in_storage(*objects)


@pytest.fixture(scope="module")
def daemon(
    bulk: None, api: RealApiServer, tmp_path_factory: pytest.TempPathFactory
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
    [stored, _] = cluster.apply(
        service("fresh", [], [port(80)]),
        endpoint_slice(
            "fresh", [endpoint(str(backend.ipv4))], [slice_port()], changed_at=changed_at
        ),
    )
    vip = cluster_ip(stored)
    wait_until(
        lambda: tcp_requests(probe, vip, 80, 1).answers == {backend.name: 1},
        APPLY_TIMEOUT,
        "the new service answers",
    )
    latency = time.monotonic() - started

    with capsys.disabled():
        print(
            f"\ne2e: a new Service answered {latency:.2f} s after it was created, "
            f"with {SERVICES} services programmed (inside the lab)"
        )
    assert tcp_requests(client(None), vip, 80, 5).answers == {backend.name: 5}
    daemon.wait_for_metric(PROGRAMMING, recorded_before)
