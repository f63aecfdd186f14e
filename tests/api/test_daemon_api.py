"""The daemon against the real API server and the fake kernel: incremental syncs, /healthz,
/livez, /metrics (checked by promtool), health-check node ports, and a start with a role that
does not (yet) allow every list."""

from __future__ import annotations

import json
import logging
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from functools import partial
from ipaddress import ip_address
from typing import Any

import pytest

from ipvsproxy.cluster.connection import ApiConnection, connect
from ipvsproxy.kernel.preconditions import PROBE_ADDRESS
from ipvsproxy.model import (
    SCHEDULERS,
    AddRealServer,
    AddVirtualServer,
    DeleteRealServer,
    RealServer,
    RealServerKey,
    UpdateRealServer,
)
from tests.api.conftest import FAST_RETRY, REAL_TIMEOUTS
from tests.api.daemons import PATIENCE, Daemons, Running, eventually, get, vip
from tests.api.kube import JsonObject, Kube, reading
from tests.chart.observability_kit import exported_names, names_in_chart, promtool
from tests.daemon_kit import NODE, cluster, endpoint_slice, node, service


@pytest.fixture
def daemons() -> Iterator[Daemons]:
    started = Daemons()
    yield started
    started.stop()


def start(daemons: Daemons, kube: Kube, api: ApiConnection, **options: object) -> Running:
    return daemons.start(api, kube.node_name(NODE), **options)  # type: ignore[arg-type]


def test_one_endpoint_slice_change_among_a_hundred_services_writes_only_its_ops(
    kube: Kube, real_api: ApiConnection, daemons: Daemons
) -> None:
    stored = kube.add_all(cluster(100))
    running = start(daemons, kube, real_api)
    assert running.daemon.synced.wait(PATIENCE)
    # Ours, and the kubernetes Service (no endpoints: nothing keeps them on loopback).
    assert len(running.kernel.recording.fake.dump()) == 101
    running.kernel.take_ops()
    running.kernel.recording.reads.clear()
    full_syncs = running.sample("ipvsproxy_syncs_total", mode="full", result="ok")

    changed = endpoint_slice(7, endpoints=2, first=1)
    now = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    changed["metadata"]["annotations"] = {"endpoints.kubernetes.io/last-change-trigger-time": now}
    kube.add(changed)
    seven = vip(next(s for s in stored if s["metadata"]["name"] == "svc-7"))
    old, new = (RealServerKey(ip_address(f"10.128.7.{n}"), 8080) for n in (1, 3))
    assert eventually(lambda: new in running.kernel.recording.fake.dump()[seven].real_servers)
    ops = running.kernel.take_ops()
    # The old endpoint, idle in the kernel, goes at once; nothing else is touched or read.
    assert ops == [AddRealServer(seven, RealServer(new)), DeleteRealServer(seven, old)]
    assert running.kernel.recording.reads == [seven]
    assert running.sample("ipvsproxy_syncs_total", mode="full", result="ok") == full_syncs
    # The change's trigger time became one network programming latency, recorded once the
    # sync that wrote it has ended.
    assert eventually(
        lambda: running.sample("kubeproxy_network_programming_duration_seconds_count") == 1
    )
    assert running.sample("kubeproxy_sync_proxy_rules_endpoint_changes_total") >= 1


def test_until_its_role_allows_every_list_the_daemon_stays_live_and_writes_nothing(
    kube: Kube, daemons: Daemons, caplog: pytest.LogCaptureFixture
) -> None:
    stored = kube.add_all(cluster(3))
    token = kube.service_account("proxy")
    kubeconfig = kube.kubeconfig_with(token, "proxy")

    def refused(plural: str) -> int:
        return sum(
            1
            for record in caplog.records
            if f"listing {plural}" in record.getMessage() and "403 Forbidden" in record.getMessage()
        )

    caplog.set_level(logging.WARNING, logger="ipvsproxy.cluster.informer")
    with connect(kubeconfig, timeouts=REAL_TIMEOUTS, retry=FAST_RETRY) as api:
        running = start(daemons, kube, api, sync_period=0.1)
        # No role yet: every list is refused, again and again, for many sync periods.
        assert eventually(lambda: refused("Services") >= 5 and refused("EndpointSlices") >= 5)
        # As kube-proxy: no sync yet is "starting up", not "stuck"; and nothing is written.
        assert get(running.healthz, "/livez")[0] == 200

        # A role without EndpointSlices: the Services and the Node arrive, the slices do not.
        kube.grant("proxy", [reading("", "services", "nodes")])
        listed = (running.informer.services.synced, running.informer.nodes.synced)
        assert eventually(lambda: all(event.is_set() for event in listed))
        slices_refused = refused("EndpointSlices")
        assert eventually(lambda: refused("EndpointSlices") >= slices_refused + 5)
        assert not running.daemon.synced.is_set()
        assert running.kernel.recording.ops == []

        kube.grant("proxy", [reading("", "services", "nodes"),
                             reading("discovery.k8s.io", "endpointslices")])  # fmt: skip
        assert running.daemon.synced.wait(PATIENCE)
    ours = {vip(obj) for obj in stored if obj["kind"] == "Service"}
    table = running.kernel.recording.fake.dump()
    # Had the services synced before their slices, the first write would have had no endpoints.
    assert all(len(table[key].real_servers) == 2 for key in ours)
    assert not any(isinstance(op, UpdateRealServer) for op in running.kernel.take_ops())


def test_healthz_and_livez_answer_as_kube_proxy(
    kube: Kube, real_api: ApiConnection, daemons: Daemons
) -> None:
    kube.add_all(cluster(2))
    running = start(daemons, kube, real_api)
    assert running.daemon.synced.wait(PATIENCE)
    status, body = get(running.healthz, "/healthz")
    assert status == 200
    answer = json.loads(body)
    assert set(answer) == {"lastUpdated", "currentTime", "nodeEligible"}
    assert answer["nodeEligible"] is True and answer["lastUpdated"].endswith("+0000 UTC")
    status, body = get(running.healthz, "/livez")
    assert status == 200 and set(json.loads(body)) == {"lastUpdated", "currentTime"}
    assert get(running.healthz, "/nothing")[0] == 404

    kube.add(
        node(spec={"taints": [{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}]})
    )
    assert eventually(lambda: get(running.healthz, "/healthz")[0] == 503)
    assert json.loads(get(running.healthz, "/healthz")[1])["nodeEligible"] is False
    assert get(running.healthz, "/livez")[0] == 200

    kube.add(node())
    assert eventually(lambda: get(running.healthz, "/healthz")[0] == 200)
    # A Node being deleted: its finalizer keeps it, with a deletionTimestamp, as a real one is
    # kept while its controllers let go of it.
    kube.add(node(metadata={"finalizers": ["ipvsproxy.io/test"]}))
    kube.delete("Node", kube.node_name(NODE))
    assert eventually(lambda: get(running.healthz, "/healthz")[0] == 503)
    assert running.sample("kubeproxy_proxy_healthz_total", code="503") >= 1
    assert running.sample("kubeproxy_proxy_livez_total", code="200") >= 1


def test_a_queued_update_older_than_twice_the_sync_period_is_unhealthy(
    kube: Kube, real_api: ApiConnection, daemons: Daemons
) -> None:
    kube.add_all(cluster(2))
    running = start(daemons, kube, real_api, sync_period=0.25)
    assert running.daemon.synced.wait(PATIENCE)
    assert get(running.healthz, "/livez")[0] == 200
    running.kernel.recording.broken = True
    # The change comes after a sync has failed: a sync that was past the kernel when it broke
    # ends well and marks every update queued so far as done, this one too were it queued
    # then (the daemon's health has that race; the test does not run into it).
    assert eventually(
        lambda: running.sample("ipvsproxy_syncs_total", mode="unknown", result="error") >= 1
    )
    kube.add(endpoint_slice(1, endpoints=3))
    assert eventually(lambda: get(running.healthz, "/livez")[0] == 503)
    assert get(running.healthz, "/healthz")[0] == 503
    running.kernel.recording.broken = False
    assert eventually(lambda: get(running.healthz, "/livez")[0] == 200)


def test_metrics_carry_kube_proxys_names_and_pass_promtool(
    kube: Kube, real_api: ApiConnection, daemons: Daemons
) -> None:
    kube.add_all(cluster(3))
    # The API server takes any annotation; the proxy knows no such scheduler.
    unknown = service(9)
    unknown["metadata"]["annotations"] = {"ipvsproxy.io/scheduler": "no-such-scheduler"}
    kube.add(unknown)
    running = start(daemons, kube, real_api)
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
        # Ours and the kubernetes Service.
        'ipvsproxy_kernel_operations_total{kind="AddVirtualServer",result="ok"} 4.0',
        "ipvsproxy_real_servers_draining 0.0",
        "ipvsproxy_service_connections_total{"
        f'namespace="{kube.namespace}",port="http",protocol="TCP",service="svc-1"}}',
    ):
        assert name in text, name
    assert 'le="0.001"' in text and 'le="16.384"' in text and 'le="300.0"' in text
    assert_promtool_accepts(text)


def assert_promtool_accepts(text: str) -> None:
    checked = subprocess.run(
        [promtool(), "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout + checked.stderr == ""


def test_a_health_check_node_port_counts_local_endpoints(
    kube: Kube, real_api: ApiConnection, daemons: Daemons
) -> None:
    balancer = service(0, type="LoadBalancer", externalTrafficPolicy="Local")
    stored = kube.add_all([node(), balancer, endpoint_slice(0, endpoints=2)])
    # The API server chose the port, as it does for every Service of this kind.
    port = int(stored[1]["spec"]["healthCheckNodePort"])
    running = start(daemons, kube, real_api)
    assert running.daemon.synced.wait(PATIENCE)
    assert eventually(lambda: get(port, "/")[0] == 200)
    assert json.loads(get(port, "/")[1]) == {
        "service": {"namespace": kube.namespace, "name": "svc-0"},
        "localEndpoints": 2,
    }
    kube.add(endpoint_slice(0, endpoints=2, node_name="node-b"))
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
    kube.delete("Service", "svc-0")
    assert eventually(lambda: not running.daemon.health_check_ports.ports)


def annotated(index: int, scheduler: str) -> dict[str, Any]:
    obj = service(index)
    obj["metadata"]["annotations"] = {"ipvsproxy.io/scheduler": scheduler}
    return obj


def test_a_service_whose_scheduler_the_kernel_refuses_costs_only_itself(
    kube: Kube, real_api: ApiConnection, daemons: Daemons
) -> None:
    """50 services, one annotated with a scheduler the kernel cannot load: it waits in
    quarantine, counted and reported on the Service as an Event the API server keeps, and
    every later change is applied by an incremental sync."""
    objects = cluster(50)
    objects[objects.index(service(7))] = annotated(7, "sed")
    stored = {obj["metadata"]["name"]: obj for obj in kube.add_all(objects)}
    running = start(
        daemons, kube, real_api, sync_period=3600.0, schedulers=SCHEDULERS - {"sed"}, events=True
    )
    assert running.daemon.synced.wait(PATIENCE)
    table = running.kernel.recording.fake
    refused = vip(stored["svc-7"])
    assert refused not in table.dump()
    assert all(vip(stored[f"svc-{index}"]) in table.dump() for index in range(50) if index != 7)

    def quarantined(kind: str = "virtual_server") -> float:
        return running.sample(
            "ipvsproxy_objects_in_quarantine", kind=kind, reason="scheduler_unavailable"
        )

    def full_syncs() -> float:
        return sum(
            running.sample("ipvsproxy_syncs_total", mode="full", result=result)
            for result in ("ok", "refused", "failed")
        )

    def events() -> list[JsonObject]:
        # Ours only: the API server writes its own (its cluster IP repair loop, for one).
        listed = kube.list_items("Event", kube.namespace)
        return [event for event in listed if event.get("reportingComponent") == "ipvsproxy"]

    assert eventually(lambda: quarantined() == 1 and quarantined("scheduler") == 1)
    labels = {"kind": "virtual_server", "reason": "scheduler_unavailable"}
    assert running.sample("ipvsproxy_objects_quarantined_total", **labels) == 1
    assert_promtool_accepts(get(running.metrics, "/metrics")[1])

    def written() -> dict[str, float]:
        results = ("created", "patched", "filtered", "dropped", "failed")
        return {
            result: running.sample("ipvsproxy_events_total", result=result) for result in results
        }

    def told() -> list[tuple[str, str, str]]:
        return [(e["involvedObject"]["name"], e["reason"], e["message"]) for e in events()]

    assert eventually(lambda: len(events()) == 1), (told(), written())
    (event,) = events()
    assert event["involvedObject"] == {
        "kind": "Service",
        "namespace": kube.namespace,
        "name": "svc-7",
        "uid": stored["svc-7"]["metadata"]["uid"],
        "apiVersion": "v1",
    }
    assert (event["type"], event["reason"], event["count"]) == ("Warning", "KernelRefused", 1)
    assert f"virtual server TCP {refused.address}:80" in event["message"]
    assert event["source"] == {"component": "ipvsproxy", "host": kube.node_name(NODE)}

    full = full_syncs()
    incremental = running.sample("ipvsproxy_syncs_total", mode="incremental", result="ok")

    def three_real_servers(index: int) -> bool:
        return len(table.dump()[vip(stored[f"svc-{index}"])].real_servers) == 3

    for index in (1, 2, 3, 4, 5):
        kube.add(endpoint_slice(index, endpoints=3))
        assert eventually(partial(three_real_servers, index))
    assert full_syncs() == full
    assert running.sample("ipvsproxy_syncs_total", mode="incremental", result="ok") >= (
        incremental + 5
    )

    # Its retry (after 4-5 s) tries the scheduler again, once, and is no new refusal to
    # count or report.
    def trials() -> int:
        return sum(
            isinstance(op, AddVirtualServer) and op.server.key.address == PROBE_ADDRESS
            for op in running.kernel.recording.ops
        )

    tried = trials()
    assert tried >= 1
    assert eventually(lambda: trials() > tried)
    kube.add(endpoint_slice(6, endpoints=3))
    assert eventually(partial(three_real_servers, 6))
    assert running.sample("ipvsproxy_objects_quarantined_total", **labels) == 1
    assert len(events()) == 1 and full_syncs() == full

    # Fixed by its owner, it is written at once, and the Service is told.
    kube.add(annotated(7, "rr"))
    assert eventually(lambda: refused in table.dump())
    assert eventually(lambda: quarantined() == 0 and quarantined("scheduler") == 0)
    assert eventually(lambda: len(events()) == 2)
    accepted = next(event for event in events() if event["reason"] != "KernelRefused")
    assert (accepted["type"], accepted["reason"]) == ("Normal", "KernelAccepted")
    assert full_syncs() == full
    assert running.sample("ipvsproxy_events_total", result="created") == 2


def test_every_metric_the_charts_alerts_and_dashboard_read_is_exported(
    kube: Kube, real_api: ApiConnection, daemons: Daemons
) -> None:
    """Scraped from a daemon that has synced; metrics with labels are there before their first
    sample (their HELP and TYPE lines), as Prometheus' metadata shows them."""
    kube.add_all(cluster(3))
    running = start(daemons, kube, real_api)
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
    # Ours and the kubernetes Service (which has no endpoints here).
    assert running.sample("ipvsproxy_virtual_servers") == 4
    assert running.sample("ipvsproxy_real_servers") == 6
    assert running.sample("ipvsproxy_bound_addresses") == 4
    assert running.sample("kubeproxy_sync_full_proxy_rules_duration_seconds_count") == 1
    assert running.sample("ipvsproxy_full_sync_last_timestamp_seconds") > 0
    kube.add(endpoint_slice(1, endpoints=3))
    assert eventually(
        lambda: running.sample("kubeproxy_sync_partial_proxy_rules_duration_seconds_count") >= 1
    )
    assert eventually(lambda: running.sample("ipvsproxy_real_servers") == 7)
