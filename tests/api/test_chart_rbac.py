"""The chart's RBAC for real: its ServiceAccount, ClusterRole and ClusterRoleBinding, rendered
by Helm and applied to the real API server (``--authorization-mode=Node,RBAC``); the proxy
with that account's real token reads and watches what it needs, and every write beyond its
role is refused by the server."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from ipaddress import ip_address
from pathlib import Path

import pytest
from click.testing import CliRunner

from ipvsproxy.cli import main
from ipvsproxy.cluster.connection import connect
from ipvsproxy.model import RealServerKey
from tests.api.conftest import FAST_RETRY, REAL_TIMEOUTS
from tests.api.daemons import PATIENCE, Daemons, eventually, vip
from tests.api.kube import KINDS, JsonObject, Kube, cluster_ip, path
from tests.api.test_read_cluster import load_example
from tests.chart.chart_kit import NAMESPACE, render
from tests.controlplane.cluster import ApiError, ControlPlane
from tests.daemon_kit import NODE, cluster, endpoint_slice

RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")


@dataclass(frozen=True)
class ChartAccount:
    """The chart's ServiceAccount on the real server: its name and a real token for it."""

    name: str
    token: str

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{NAMESPACE}:{self.name}"


@pytest.fixture(scope="module")
def chart_account(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ChartAccount]:
    objects = [obj for obj in render() if obj["kind"] in RBAC_KINDS]
    assert sorted(obj["kind"] for obj in objects) == sorted(RBAC_KINDS)
    admin = Kube(control_plane, NAMESPACE, tmp_path_factory.mktemp("chart-rbac"))
    for obj in objects:
        admin.apply(obj)
    (account,) = (obj["metadata"]["name"] for obj in objects if obj["kind"] == "ServiceAccount")
    yield ChartAccount(account, control_plane.service_account_token(NAMESPACE, account))
    for obj in reversed(objects):
        admin.delete(obj["kind"], obj["metadata"]["name"], NAMESPACE)


@pytest.fixture
def chart_kubeconfig(kube: Kube, chart_account: ChartAccount) -> Path:
    return kube.kubeconfig_with(chart_account.token, "chart")


def forbidden(
    control_plane: ControlPlane,
    account: ChartAccount,
    method: str,
    api_path: str,
    body: JsonObject | None,
) -> str:
    """The server's refusal of one request as ``account``; fails if it was not refused."""
    with pytest.raises(ApiError) as caught:
        control_plane.request(method, api_path, body, token=account.token)
    assert caught.value.status == 403, caught.value.body
    message: str = json.loads(caught.value.body)["message"]
    return message


def test_sync_once_reads_the_cluster_with_the_charts_token(
    kube: Kube, chart_kubeconfig: Path
) -> None:
    stored = load_example(kube)
    node = kube.node_name("node-a")

    result = CliRunner().invoke(
        main,
        ["sync", "--once", "--dry-run", "--hostname-override", node,
         "--kubeconfig", str(chart_kubeconfig), "--output", "json"],
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    dns = next(obj for obj in stored if obj["metadata"]["name"] == "kube-dns")
    texts = [op["text"] for op in json.loads(result.stdout)["operations"]]
    assert f"add real server 10.244.0.5:53 to UDP {cluster_ip(dns)}:53" in texts


def test_the_daemon_lists_watches_and_syncs_with_the_charts_token(
    kube: Kube, chart_kubeconfig: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    stored = kube.add_all(cluster(2))
    daemons = Daemons()
    try:
        with connect(chart_kubeconfig, timeouts=REAL_TIMEOUTS, retry=FAST_RETRY) as api:
            running = daemons.start(api, kube.node_name(NODE))
            assert running.daemon.synced.wait(PATIENCE)
            one = vip(next(obj for obj in stored if obj["metadata"]["name"] == "svc-1"))
            assert len(running.kernel.recording.fake.dump()[one].real_servers) == 2
            # The watch carries the change, and an incremental sync writes it.
            kube.add(endpoint_slice(1, endpoints=3))
            third = RealServerKey(ip_address("10.128.1.3"), 8080)
            assert eventually(
                lambda: third in running.kernel.recording.fake.dump()[one].real_servers
            )
    finally:
        daemons.stop()
    assert not [r.getMessage() for r in caplog.records if "403" in r.getMessage()]


def test_what_the_role_does_not_grant_is_refused_by_the_server(
    kube: Kube, chart_account: ChartAccount
) -> None:
    plane = kube.control_plane
    stored = kube.add({"kind": "Service", "metadata": {"name": "web"},
                       "spec": {"ports": [{"port": 80}]}})  # fmt: skip
    name = stored["metadata"]["name"]

    refusals = [
        forbidden(plane, chart_account, "DELETE", path("Service", kube.namespace, name), None),
        forbidden(plane, chart_account, "POST", path("Secret", kube.namespace),
                  {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "stolen"}}),
        forbidden(plane, chart_account, "GET", path("Secret", kube.namespace), None),
        forbidden(plane, chart_account, "PATCH", path("Node", name=kube.node_name()),
                  {"metadata": {"labels": {"a": "b"}}}),
        forbidden(plane, chart_account, "POST", path("EndpointSlice", kube.namespace),
                  {"apiVersion": KINDS["EndpointSlice"].api_version, "kind": "EndpointSlice",
                   "metadata": {"name": "forged"}, "addressType": "IPv4", "endpoints": []}),
    ]  # fmt: skip

    assert all(f'User "{chart_account.user}" cannot' in message for message in refusals)
    # The Service is still there.
    assert kube.get("Service", name)["metadata"]["uid"] == stored["metadata"]["uid"]


def test_the_events_it_may_report_are_accepted(kube: Kube, chart_account: ChartAccount) -> None:
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "ipvsproxy-started"},
        "involvedObject": {"kind": "Service", "namespace": kube.namespace, "name": "web"},
        "reason": "Starting",
        "message": "ipvsproxy started",
        "type": "Normal",
    }
    created = kube.control_plane.request(
        "POST", path("Event", kube.namespace), event, token=chart_account.token
    )
    assert created["metadata"]["name"] == "ipvsproxy-started"
