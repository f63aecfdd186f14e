"""Scenario 11: a malformed Service and EndpointSlice among good ones, on the fake API server,
with a daemon of its own."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.e2e.conftest import Cluster, Pods, running_daemon
from tests.lab.apiserver import LabApiServer
from tests.lab.daemon import Daemon
from tests.lab.netns import Client, Node, Pod
from tests.lab.objects import (
    SERVICE_NAME_LABEL,
    endpoint,
    endpoint_slice,
    port,
    service,
    slice_port,
)
from tests.lab.objects import node as node_object
from tests.lab.traffic import tcp_requests, wait_answered_by

SKIPPED = "ipvsproxy_objects_skipped_total"


@pytest.fixture(scope="module")
def api(node: Node, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabApiServer]:
    server = LabApiServer(tmp_path_factory.mktemp("fake-api")).start()
    server.apply(node_object("node-a", str(node.ipv4), str(node.ipv6)))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def daemon(api: LabApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with running_daemon(api, tmp_path_factory.mktemp("malformed")) as running:
        yield running


def test_bad_objects_are_skipped_logged_and_counted_while_good_ones_work(
    daemon: Daemon, cluster: Cluster, pods: Pods, client: Callable[[Pod | None], Client]
) -> None:
    """Needs the fake: the real API server's validation refuses both objects at the door."""
    backends = [pods(f"good-{index}") for index in range(2)]
    caller = client(pods("good-caller"))
    names = {b.name for b in backends}
    skipped_before = daemon.metrics().value(SKIPPED)
    broken_service = service("broken-svc", ["10.96.11.2"], [port(80)])
    broken_service["spec"]["ports"] = "eighty"
    broken_slice = {
        "kind": "EndpointSlice",
        "metadata": {"name": "broken-slice", "labels": {SERVICE_NAME_LABEL: "good"}},
        "addressType": "IPv4",
        "endpoints": {"addresses": "10.244.1.250"},
        "ports": [slice_port()],
    }
    cluster.apply(
        service("good", ["10.96.11.1"], [port(80)]),
        broken_service,
        broken_slice,
        endpoint_slice("good", [endpoint(str(b.ipv4)) for b in backends], [slice_port()]),
    )

    wait_answered_by(caller, "10.96.11.1", 80, names)
    tally = tcp_requests(caller, "10.96.11.1", 80, 20)

    assert tally.failures == []
    assert set(tally.answers) == names
    assert daemon.healthz().status == 200
    # Both bad objects counted.
    daemon.wait_for_metric(SKIPPED, skipped_before + 1)
    log = daemon.log()
    assert "broken-svc" in log
    assert "broken-slice" in log
