"""The PrometheusRule and the Grafana dashboard the chart ships: off by default, each
expression accepted by promtool, each alert firing on the series it is about and quiet
without them. That every metric they name is exported is checked against a running daemon
(tests/api/test_daemon_api.py) and against the chart's pod in the lab
(tests/kernel/test_chart_sysctl_lab.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.chart_kit import kinds, render
from tests.chart.observability_kit import (
    OBSERVABILITY_VALUES,
    metric_names,
    panel_expressions,
    rendered,
    rule_expressions,
    run_promtool,
    with_grafana_variables,
)

JOB = "kube-proxy"
INSTANCE = "192.0.2.1:10249"
TARGET = f'job="{JOB}",instance="{INSTANCE}"'
TARGET_LABELS = {"job": JOB, "instance": INSTANCE}


def test_off_by_default() -> None:
    assert {"PrometheusRule", "ServiceMonitor"}.isdisjoint(kinds(render()))
    dashboards = [obj for obj in render() if obj["metadata"]["name"].endswith("-dashboard")]
    assert dashboards == []


def test_the_dashboard_is_a_configmap_the_grafana_sidecar_loads() -> None:
    (configmap,) = (
        obj
        for obj in render(OBSERVABILITY_VALUES)
        if obj["kind"] == "ConfigMap" and obj["metadata"]["name"].endswith("-dashboard")
    )
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    _, dashboard = rendered()
    assert dashboard["uid"] == "ipvsproxy"
    assert [v["name"] for v in dashboard["templating"]["list"]] == [
        "datasource",
        "job",
        "instance",
    ]
    for title, expression in panel_expressions(dashboard):
        assert 'job=~"$job"' in expression, title


def test_the_service_monitor_keeps_the_job_name_kube_proxys_alerts_select() -> None:
    objects = render(OBSERVABILITY_VALUES)
    (monitor,) = (obj for obj in objects if obj["kind"] == "ServiceMonitor")
    (service,) = (obj for obj in objects if obj["kind"] == "Service")
    assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == JOB
    rules, _ = rendered()
    for name, expression in rule_expressions(rules):
        assert f'job="{JOB}"' in expression, name


def test_every_rule_and_panel_expression_passes_promtool(tmp_path: Path) -> None:
    rules, dashboard = rendered()
    rule_file = tmp_path / "rules.yaml"
    rule_file.write_text(yaml.safe_dump(rules))
    checked = run_promtool("check", "rules", rule_file)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 8 rules found" in checked.stdout
    # Each panel's query, with Grafana's variables filled in, as a recording rule.
    recorded = [
        {"record": f"panel:{number}", "expr": with_grafana_variables(expression)}
        for number, (_, expression) in enumerate(panel_expressions(dashboard))
    ]
    panels_file = tmp_path / "panels.yaml"
    panels_file.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": recorded}]}))
    checked = run_promtool("check", "rules", panels_file)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_rules_name_the_metrics_they_read() -> None:
    rules, _ = rendered()
    named = {name for _, expression in rule_expressions(rules) for name in metric_names(expression)}
    assert named == {
        "up",
        "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
        "ipvsproxy_syncs_total",
        "ipvsproxy_drift_repairs_total",
        "kubeproxy_network_programming_duration_seconds_bucket",
        "ipvsproxy_objects_skipped_total",
        "ipvsproxy_objects_in_quarantine",
    }
    assert metric_names('sum by (le) (rate(a_bucket{x="y(z)"}[5m])) / on (j) b + time()') == {
        "a_bucket",
        "b",
    }


def _case(eval_minutes: int, alert: str, *fired: dict[str, Any]) -> dict[str, Any]:
    return {"eval_time": f"{eval_minutes}m", "alertname": alert, "exp_alerts": list(fired)}


def _fired(labels: dict[str, str], description: str, summary: str) -> dict[str, Any]:
    return {
        "exp_labels": labels,
        "exp_annotations": {"summary": summary, "description": description},
    }


# Each alert: the series fed in, when it is evaluated, and what fires then (nothing, for the
# series of a healthy proxy).
SCENARIOS: dict[str, tuple[list[dict[str, str]], list[dict[str, Any]]]] = {
    "a proxy down": (
        [{"series": f"up{{{TARGET}}}", "values": "0x30"}],
        [
            _case(9, "IpvsproxyTargetDown"),
            _case(11, "IpvsproxyTargetDown", _fired(
                {**TARGET_LABELS, "severity": "warning"},
                f"{INSTANCE} has not answered /metrics for 10 minutes.",
                "An ipvsproxy does not answer Prometheus.")),
            _case(14, "IpvsproxyDown"),
            _case(16, "IpvsproxyDown", _fired(
                # absent() of a filtered vector has no labels to give.
                {"severity": "critical"},
                f"No target of job {JOB} has been up for 15 minutes. Services stay as the "
                "nodes last programmed them, but no change reaches them.",
                "No ipvsproxy answers Prometheus.")),
        ],
    ),
    "a proxy up": (
        [{"series": f"up{{{TARGET}}}", "values": "1x30"}],
        [_case(20, "IpvsproxyDown"), _case(20, "IpvsproxyTargetDown")],
    ),
    "no sync since the start": (
        [{"series": f"kubeproxy_sync_proxy_rules_last_timestamp_seconds{{{TARGET}}}",
          "values": "0x20"}],
        [_case(10, "IpvsproxySyncStale"),
         _case(11, "IpvsproxySyncStale", _fired(
             {**TARGET_LABELS, "severity": "warning"},
             f"{INSTANCE} last synced 11m 0s ago; a full sync is due every 30s.",
             "An ipvsproxy has not synced for a while."))],
    ),
    "a sync every minute": (
        [{"series": f"kubeproxy_sync_proxy_rules_last_timestamp_seconds{{{TARGET}}}",
          "values": "0+60x20"}],
        [_case(20, "IpvsproxySyncStale")],
    ),
    "failing syncs": (
        [{"series": f'ipvsproxy_syncs_total{{{TARGET},mode="full",result="failed"}}',
          "values": "0+1x30"},
         {"series": f'ipvsproxy_syncs_total{{{TARGET},mode="incremental",result="ok"}}',
          "values": "0+5x30"}],
        [_case(20, "IpvsproxySyncsFailing", _fired(
            {**TARGET_LABELS, "severity": "warning"},
            f"{INSTANCE} has had failing syncs for 15 minutes (errors, or kernel operations a "
            "retry may fix); its log names each.",
            "An ipvsproxy's syncs keep failing."))],
    ),
    "only good syncs, and refusals held in quarantine": (
        [{"series": f'ipvsproxy_syncs_total{{{TARGET},mode="full",result="ok"}}',
          "values": "0+1x30"},
         {"series": f'ipvsproxy_syncs_total{{{TARGET},mode="full",result="refused"}}',
          "values": "0+1x30"}],
        [_case(20, "IpvsproxySyncsFailing")],
    ),
    "drift repaired": (
        [{"series": f'ipvsproxy_drift_repairs_total{{{TARGET},kind="virtual_server"}}',
          "values": "0 0 0 3x10"}],
        [_case(2, "IpvsproxyDriftRepaired"),
         _case(5, "IpvsproxyDriftRepaired", _fired(
             {**TARGET_LABELS, "severity": "warning"},
             f"{INSTANCE} put back kernel objects changed behind its back in the last 30 "
             "minutes (another proxy, ipvsadm, a cleanup); ipvsproxy_drift_repairs_total "
             "says which kinds.",
             "Something changes the kernel's service state behind ipvsproxy."))],
    ),
    "slow network programming": (
        [{"series": f'kubeproxy_network_programming_duration_seconds_bucket{{{TARGET},le="1.0"}}',
          "values": "0x30"},
         {"series": f'kubeproxy_network_programming_duration_seconds_bucket{{{TARGET},le="60.0"}}',
          "values": "0+10x30"},
         {"series": f'kubeproxy_network_programming_duration_seconds_bucket{{{TARGET},le="+Inf"}}',
          "values": "0+10x30"}],
        [_case(20, "IpvsproxyNetworkProgrammingSlow", _fired(
            {"job": JOB, "severity": "warning"},
            "The 99th percentile of network programming latency is 59.41s, above 30 s.",
            "Endpoint changes take long to reach the nodes."))],
    ),
    "fast network programming": (
        [{"series": f'kubeproxy_network_programming_duration_seconds_bucket{{{TARGET},le="1.0"}}',
          "values": "0+10x30"},
         {"series": f'kubeproxy_network_programming_duration_seconds_bucket{{{TARGET},le="+Inf"}}',
          "values": "0+10x30"}],
        [_case(20, "IpvsproxyNetworkProgrammingSlow")],
    ),
    "sysctls refused": (
        [{"series": f'ipvsproxy_objects_in_quarantine{{{TARGET},kind="sysctl",reason="EROFS"}}',
          "values": "4x30"},
         {"series": f'ipvsproxy_objects_in_quarantine{{{TARGET},kind="virtual_server",'
                    'reason="scheduler_unavailable"}', "values": "0x30"}],
        [_case(14, "IpvsproxyKernelRefusals"),
         _case(16, "IpvsproxyKernelRefusals", _fired(
             {**TARGET_LABELS, "kind": "sysctl", "reason": "EROFS", "severity": "warning"},
             f"{INSTANCE} holds 4 sysctl objects the kernel refused (EROFS), retried with "
             "backoff; its log names each. A sysctl refused as EROFS means the pod's /proc/sys "
             "is read-only: keep the chart's kernel-parameters init container.",
             "The kernel refuses objects an ipvsproxy writes."))],
    ),
    "objects skipped, seen by two nodes": (
        [{"series": f'ipvsproxy_objects_skipped_total{{{TARGET},reason="invalid"}}',
          "values": "0 1 1 1 1"},
         {"series": f'ipvsproxy_objects_skipped_total{{job="{JOB}",instance="192.0.2.2:10249",'
                    'reason="invalid"}', "values": "0 1 1 1 1"}],
        [_case(4, "IpvsproxyObjectsSkipped", _fired(
            {"job": JOB, "reason": "invalid", "severity": "info"},
            "1 objects were newly skipped as invalid in the last hour; the proxy's log names "
            "each, as does `ipvsproxy sync --once --dry-run --summary`.",
            "Services or parts of them are left out as invalid."))],
    ),
}  # fmt: skip


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_each_alert_fires_on_its_series_and_only_then(scenario: str, tmp_path: Path) -> None:
    rules, _ = rendered()
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules))
    series, cases = SCENARIOS[scenario]
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": cases}],
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test))
    checked = run_promtool("test", "rules", tmp_path / "test.yaml")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_every_alert_has_a_scenario_that_fires_it() -> None:
    rules, _ = rendered()
    alerts = {name for name, _ in rule_expressions(rules)}
    fired = {
        case["alertname"] for _, cases in SCENARIOS.values() for case in cases if case["exp_alerts"]
    }
    assert fired == alerts
