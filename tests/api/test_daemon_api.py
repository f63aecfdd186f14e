"""The daemon against the fake API server over HTTP and the fake kernel: incremental syncs,
/healthz, /livez, /metrics (checked by promtool) and health-check node ports."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from ipaddress import ip_address
from typing import Any

import pytest

from ipvsproxy.cluster.connection import ApiConnection
from ipvsproxy.cluster.informer import Backoff, ClusterInformer
from ipvsproxy.daemon.daemon import Daemon, DaemonOptions
from ipvsproxy.daemon.sources import ApiSource
from ipvsproxy.model import (
    AddRealServer,
    DeleteRealServer,
    RealServer,
    RealServerKey,
    TransportProtocol,
    UpdateRealServer,
    VirtualServerKey,
)
from ipvsproxy.translate import Settings
from tests.api.fake_apiserver import FakeApiServer
from tests.chart.observability_kit import exported_names, names_in_chart
from tests.daemon_kit import NODE, RecordingKernel, cluster, endpoint_slice, node, service

PATIENCE = 20.0


def eventually(predicate: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + PATIENCE
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@dataclass
class Running:
    daemon: Daemon
    kernel: RecordingKernel
    healthz: int
    metrics: int

    def sample(self, name: str, **labels: str) -> float:
        value = self.daemon.metrics.registry.get_sample_value(name, labels)
        return value or 0.0


@pytest.fixture
def start(fake: FakeApiServer, api: ApiConnection) -> Iterator[Callable[..., Running]]:
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def begin(sync_period: float = 30.0, **settings: Any) -> Running:
        kernel = RecordingKernel()
        options = DaemonOptions(
            sync_period=sync_period,
            min_sync_period=0.1,
            healthz=("127.0.0.1", 0),
            metrics=("127.0.0.1", 0),
            traffic=kernel.recording.fake.dump,
            tick=0.1,
            drain_check_period=0.2,
            health_check_host="127.0.0.1",
        )
        daemon = Daemon(kernel.kernel(), Settings(**settings), options)
        informer = ClusterInformer(
            api,
            NODE,
            watch_timeout=5,
            backoff=Backoff(0.05, 0.2),
            hooks=daemon.informer_hooks(),
            workers=daemon.workers,
        )
        daemon.serve()
        healthz, metrics = daemon.ports
        thread = threading.Thread(target=daemon.run, args=(ApiSource(informer), stop))
        thread.start()
        threads.append(thread)
        return Running(daemon, kernel, healthz, metrics)

    yield begin
    stop.set()
    for thread in threads:
        thread.join(PATIENCE)
        assert not thread.is_alive()


def test_one_endpoint_slice_change_among_a_thousand_services_writes_only_its_ops(
    fake: FakeApiServer, start: Callable[..., Running]
) -> None:
    for obj in cluster(1000):
        fake.apply(obj)
    running = start()
    assert running.daemon.synced.wait(PATIENCE)
    assert len(running.kernel.recording.fake.dump()) == 1000
    running.kernel.take_ops()
    running.kernel.recording.reads.clear()
    full_syncs = running.sample("ipvsproxy_syncs_total", mode="full", result="ok")

    changed = endpoint_slice(7, endpoints=2, first=1)
    now = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    changed["metadata"]["annotations"] = {"endpoints.kubernetes.io/last-change-trigger-time": now}
    fake.apply(changed)
    vip = VirtualServerKey(TransportProtocol.TCP, ip_address("10.96.0.8"), 80)
    old, new = (RealServerKey(ip_address(f"10.128.7.{n}"), 8080) for n in (1, 3))
    assert eventually(lambda: new in running.kernel.recording.fake.dump()[vip].real_servers)
    ops = running.kernel.take_ops()
    # The old endpoint, idle in the kernel, goes at once; nothing else is touched or read.
    assert ops == [AddRealServer(vip, RealServer(new)), DeleteRealServer(vip, old)]
    assert running.kernel.recording.reads == [vip]
    assert running.sample("ipvsproxy_syncs_total", mode="full", result="ok") == full_syncs
    # The change's trigger time became one network programming latency, recorded once the
    # sync that wrote it has ended.
    assert eventually(
        lambda: running.sample("kubeproxy_network_programming_duration_seconds_count") == 1
    )
    assert running.sample("kubeproxy_sync_proxy_rules_endpoint_changes_total") >= 1


def test_no_kernel_write_before_every_list_has_arrived(
    fake: FakeApiServer, start: Callable[..., Running]
) -> None:
    for obj in cluster(3):
        fake.apply(obj)
    # Services list; the EndpointSlice list fails for a while (500s), then recovers.
    fake.fail_next(6, 500)
    running = start()
    assert running.daemon.synced.wait(PATIENCE)
    table = running.kernel.recording.fake.dump()
    # Had the services synced before their slices, the first write would have had no endpoints.
    assert all(len(state.real_servers) == 2 for state in table.values())
    first_ops = running.kernel.take_ops()
    assert not any(isinstance(op, UpdateRealServer) for op in first_ops)


def test_healthz_and_livez_answer_as_kube_proxy(
    fake: FakeApiServer, start: Callable[..., Running]
) -> None:
    for obj in cluster(2):
        fake.apply(obj)
    running = start()
    assert running.daemon.synced.wait(PATIENCE)
    status, body = get(running.healthz, "/healthz")
    assert status == 200
    answer = json.loads(body)
    assert set(answer) == {"lastUpdated", "currentTime", "nodeEligible"}
    assert answer["nodeEligible"] is True and answer["lastUpdated"].endswith("+0000 UTC")
    status, body = get(running.healthz, "/livez")
    assert status == 200 and set(json.loads(body)) == {"lastUpdated", "currentTime"}
    assert get(running.healthz, "/nothing")[0] == 404

    fake.apply(
        node(spec={"taints": [{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}]})
    )
    assert eventually(lambda: get(running.healthz, "/healthz")[0] == 503)
    assert json.loads(get(running.healthz, "/healthz")[1])["nodeEligible"] is False
    assert get(running.healthz, "/livez")[0] == 200

    fake.apply(node())
    assert eventually(lambda: get(running.healthz, "/healthz")[0] == 200)
    fake.apply(node(metadata={"deletionTimestamp": "2026-01-01T00:00:00Z"}))
    assert eventually(lambda: get(running.healthz, "/healthz")[0] == 503)
    assert running.sample("kubeproxy_proxy_healthz_total", code="503") >= 1
    assert running.sample("kubeproxy_proxy_livez_total", code="200") >= 1


def test_healthy_while_starting_up_however_long_the_lists_take(
    fake: FakeApiServer, start: Callable[..., Running]
) -> None:
    for obj in cluster(1):
        fake.apply(obj)
    fake.fail_next(100_000, 500)
    running = start(sync_period=0.1)
    # Five sync periods of failing lists.
    assert eventually(lambda: len(fake.requests) >= 10)
    time.sleep(0.5)
    # As kube-proxy: no sync yet is "starting up", not "stuck"; and nothing is written.
    assert get(running.healthz, "/livez")[0] == 200
    assert not running.daemon.synced.is_set()
    assert running.kernel.recording.ops == []


def test_a_queued_update_older_than_twice_the_sync_period_is_unhealthy(
    fake: FakeApiServer, start: Callable[..., Running]
) -> None:
    for obj in cluster(2):
        fake.apply(obj)
    running = start(sync_period=0.25)
    assert running.daemon.synced.wait(PATIENCE)
    assert get(running.healthz, "/livez")[0] == 200
    running.kernel.recording.broken = True
    fake.apply(endpoint_slice(1, endpoints=3))
    assert eventually(lambda: get(running.healthz, "/livez")[0] == 503)
    assert get(running.healthz, "/healthz")[0] == 503
    assert running.sample("ipvsproxy_syncs_total", mode="unknown", result="error") >= 1
    running.kernel.recording.broken = False
    assert eventually(lambda: get(running.healthz, "/livez")[0] == 200)


def test_metrics_carry_kube_proxys_names_and_pass_promtool(
    fake: FakeApiServer, start: Callable[..., Running]
) -> None:
    for obj in cluster(3):
        fake.apply(obj)
    fake.apply(service(9, clusterIP="10.96.0.999"))
    running = start()
    assert running.daemon.synced.wait(PATIENCE)
    assert running.sample("ipvsproxy_objects_skipped_total", reason="invalid") == 1
    status, text = get(running.metrics, "/metrics")
    assert status == 200
    for name in (
        "kubeproxy_sync_proxy_rules_duration_seconds_bucket",
        "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
        "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
        "kubeproxy_network_programming_duration_seconds_bucket",
        "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
        "kubeproxy_sync_proxy_rules_endpoint_changes_total",
        "kubeproxy_sync_proxy_rules_service_changes_pending",
        "kubeproxy_sync_proxy_rules_service_changes_total",
        'kubeproxy_sync_proxy_rules_no_local_endpoints_total{traffic_policy="external"}',
        "kubeproxy_sync_proxy_rules_iptables_restore_failures_total",
        'ipvsproxy_kernel_operations_total{kind="AddVirtualServer",result="ok"} 3.0',
        "ipvsproxy_real_servers_draining 0.0",
        'ipvsproxy_service_connections_total{namespace="default",port="http",protocol="TCP",service="svc-1"}',
    ):
        assert name in text, name
    assert 'le="0.001"' in text and 'le="16.384"' in text and 'le="300.0"' in text
    promtool = shutil.which("promtool")
    if promtool is None:
        message = "promtool is missing (Debian's prometheus package)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout + checked.stderr == ""


def test_every_metric_the_charts_alerts_and_dashboard_read_is_exported(
    fake: FakeApiServer, start: Callable[..., Running]
) -> None:
    """Scraped from a daemon that has synced; metrics with labels are there before their first
    sample (their HELP and TYPE lines), as Prometheus' metadata shows them."""
    for obj in cluster(3):
        fake.apply(obj)
    running = start()
    assert running.daemon.synced.wait(PATIENCE)
    status, text = get(running.metrics, "/metrics")
    assert status == 200
    exported = exported_names(text)
    missing = {
        title: sorted(names - exported)
        for title, names in names_in_chart().items()
        if names - exported
    }
    assert missing == {}
    for name in ("process_resident_memory_bytes", "python_info", "ipvsproxy_build_info"):
        assert name in exported
    assert running.sample("ipvsproxy_virtual_servers") == 3
    assert running.sample("ipvsproxy_real_servers") == 6
    assert running.sample("ipvsproxy_bound_addresses") == 3
    assert running.sample("kubeproxy_sync_full_proxy_rules_duration_seconds_count") == 1
    assert running.sample("ipvsproxy_full_sync_last_timestamp_seconds") > 0
    fake.apply(endpoint_slice(1, endpoints=3))
    assert eventually(
        lambda: running.sample("kubeproxy_sync_partial_proxy_rules_duration_seconds_count") == 1
    )
    assert eventually(lambda: running.sample("ipvsproxy_real_servers") == 7)


def test_a_health_check_node_port_counts_local_endpoints(
    fake: FakeApiServer, start: Callable[..., Running]
) -> None:
    port = free_port()
    balancer = service(
        0,
        type="LoadBalancer",
        externalTrafficPolicy="Local",
        healthCheckNodePort=port,
    )
    balancer["spec"]["ports"][0]["nodePort"] = 30080
    for obj in (node(), balancer, endpoint_slice(0, endpoints=2)):
        fake.apply(obj)
    running = start()
    assert running.daemon.synced.wait(PATIENCE)
    assert eventually(lambda: get(port, "/")[0] == 200)
    assert json.loads(get(port, "/")[1]) == {
        "service": {"namespace": "default", "name": "svc-0"},
        "localEndpoints": 2,
    }
    fake.apply(endpoint_slice(0, endpoints=2, node_name="node-b"))
    assert eventually(lambda: get(port, "/")[0] == 503)
    assert json.loads(get(port, "/")[1])["localEndpoints"] == 0
    assert eventually(
        lambda: (
            running.sample(
                "kubeproxy_sync_proxy_rules_no_local_endpoints_total", traffic_policy="external"
            )
            == 1
        )
    )
    fake.delete("Service", "default", "svc-0")
    assert eventually(lambda: not running.daemon.health_check_ports.ports)
