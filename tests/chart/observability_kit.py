"""The chart's PrometheusRule and dashboard as Prometheus sees them: expressions, names, promtool.

``metric_names`` reads the metric names a PromQL expression selects, by what PromQL's grammar
allows there: a name is an identifier that is not a function (followed by ``(``), not a
keyword, not inside ``{...}`` (label matchers), ``[...]`` (ranges) or a grouping's label
list, and not a string or a number.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from tests.chart.chart_kit import CHART, render_files
from tests.requires import missing

KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
     "offset", "bool", "inf", "nan"}
)  # fmt: skip
_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_BRACES = re.compile(r"\{[^{}]*\}|\[[^\[\]]*\]")
_GROUPING = re.compile(
    r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.IGNORECASE
)
_IDENTIFIER = re.compile(r"(?<![\w.:])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?")
# What Grafana puts in at query time, as the PNG script and these tests do.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$job": ".+", "$instance": ".+"}

OBSERVABILITY_VALUES: dict[str, Any] = {
    "metrics": {
        "bindAddress": "0.0.0.0",
        "serviceMonitor": {"enabled": True, "job": "kube-proxy"},
        "prometheusRule": {"enabled": True},
        "dashboard": {"enabled": True},
    }
}


def metric_names(expression: str) -> set[str]:
    text = _STRING.sub('""', expression)
    text = _BRACES.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    return {
        name
        for name, call in _IDENTIFIER.findall(text)
        if not call and name.lower() not in KEYWORDS
    }


def with_grafana_variables(
    expression: str, variables: Mapping[str, str] = GRAFANA_VARIABLES
) -> str:
    for variable, value in variables.items():
        expression = expression.replace(variable, value)
    return expression


def rendered(values: Mapping[str, Any] = OBSERVABILITY_VALUES) -> tuple[dict[str, Any], Any]:
    """(the PrometheusRule's spec, the dashboard) as the chart renders them."""
    files = render_files(values)
    rule = yaml.safe_load(files[f"{CHART.name}/templates/prometheusrule.yaml"])
    configmap = yaml.safe_load(files[f"{CHART.name}/templates/dashboard.yaml"])
    return rule["spec"], json.loads(configmap["data"]["ipvsproxy.json"])


def panel_expressions(dashboard: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(panel title, expression) of every query of every panel."""
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]


def rule_expressions(spec: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    for group in spec["groups"]:
        for rule in group["rules"]:
            yield rule.get("alert") or rule["record"], rule["expr"]


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        missing("promtool is missing (Debian's prometheus package)")
    return found


def run_promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *map(str, args)], capture_output=True, text=True, check=False
    )


# The sample names each metric type of the text format carries (OpenMetrics' _created left out:
# nothing selects it).
_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("", "_sum", "_count"),
    "gauge": ("",),
    "untyped": ("",),
}


def exported_names(exposition: str) -> set[str]:
    """The series names a scrape of this text gives Prometheus, with ``up``, which it adds."""
    names = {"up"}
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            base = name.removesuffix("_total") if kind == "counter" else name
            names.update(base + suffix for suffix in _SUFFIXES[kind])
    return names


def names_in_chart() -> dict[str, set[str]]:
    """Every metric name the PrometheusRule and the dashboard read, by rule or panel."""
    rules, dashboard = rendered()
    named: dict[str, set[str]] = {}
    for title, expression in [*rule_expressions(rules), *panel_expressions(dashboard)]:
        named.setdefault(title, set()).update(metric_names(with_grafana_variables(expression)))
    return named
