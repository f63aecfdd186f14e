"""The chart lints strictly and renders valid Kubernetes objects with every documented option."""

from __future__ import annotations

import copy
from typing import Any

import kubernetes_validate
import pytest
import yaml

from ipvsproxy import __version__
from tests.chart.chart_kit import CHART, Manifest, kinds, lint, render

# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest the
# validator knows: an object valid in both is valid in between for these stable APIs.
KUBE_VERSIONS = ("1.25.0", kubernetes_validate.utils.latest_version())

# Each documented option (values.yaml) set away from its default.
OPTIONS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "image": {"image": {"repository": "registry.example/ipvsproxy", "tag": "v1",
                        "pullPolicy": "Always"}, "imagePullSecrets": [{"name": "regcred"}]},
    "names": {"nameOverride": "proxy", "fullnameOverride": "node-proxy"},
    "apiServer": {"apiServer": "https://10.0.0.10:6443"},
    "ipvs": {"ipvs": {"scheduler": "mh", "strictARP": True, "excludeCIDRs": ["10.9.0.0/16"],
                      "syncPeriod": "1m", "minSyncPeriod": "2s"}},
    "masqueradeAll": {"masqueradeAll": True},
    "dualStack": {"clusterCIDR": "10.244.0.0/16,fd00:10:244::/56"},
    "nodePortAddresses": {"nodePortAddresses": ["primary"]},
    "detectLocal": {"detectLocalMode": "InterfaceNamePrefix",
                    "detectLocal": {"interfaceNamePrefix": "veth"}},
    "healthz": {"healthz": {"bindAddress": "192.0.2.1", "port": 20256}},
    "healthzIPv6": {"healthz": {"bindAddress": "::", "port": 10256}},
    "metricsExposed": {"metrics": {"bindAddress": "0.0.0.0", "port": 10249,
                                   "service": {"annotations": {"a.example/scrape": "true"}}}},
    "serviceMonitor": {"metrics": {"bindAddress": "0.0.0.0",
                                   "serviceMonitor": {"enabled": True, "interval": "15s",
                                                      "labels": {"release": "prom"}}}},
    "metricsOff": {"metrics": {"port": 0, "trafficMetrics": False}},
    "observability": {"metrics": {"bindAddress": "0.0.0.0", "trafficMetrics": True,
                                  "serviceMonitor": {"enabled": True, "job": "kube-proxy",
                                                     "relabelings": [{"targetLabel": "cluster",
                                                                      "replacement": "east"}],
                                                     "metricRelabelings": [{
                                                         "action": "drop",
                                                         "sourceLabels": ["__name__"],
                                                         "regex": "python_gc_.*"}]},
                                  "prometheusRule": {"enabled": True, "labels": {"r": "p"},
                                                     "syncStaleSeconds": 120,
                                                     "networkProgrammingP99Seconds": 2.5},
                                  "dashboard": {"enabled": True,
                                                "annotations": {"grafana_folder": "Net"}}}},
    "kernel": {"masqueradeBit": 13, "ipvs": {"tcpTimeout": "900s", "tcpFinTimeout": "2m",
                                             "udpTimeout": "0s"},
               "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s",
                             "tcpCloseWaitTimeout": "0s", "tcpBeLiberal": True,
                             "udpTimeout": "30s", "udpStreamTimeout": "2m"}},
    "existingConfigMap": {"existingConfigMap": {"name": "kube-proxy", "key": "config.conf"}},
    "noInitContainer": {"initKernelParameters": False},
    "logging": {"logging": {"format": "json", "verbosity": 4}},
    "migration": {"migration": {"enabled": True, "nodeLabelValue": "ipvs"}},
    "privileged": {"privileged": True},
    "maxUnavailable": {"maxUnavailable": "10%"},
    "scheduling": {"priorityClassName": "", "tolerations": [],
                   "nodeSelector": {"kubernetes.io/os": "linux", "proxy": "ipvs"},
                   "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                       "nodeSelectorTerms": [{"matchExpressions": [
                           {"key": "proxy", "operator": "NotIn", "values": ["kube-proxy"]}]}]}}}},
    "resources": {"resources": {"requests": {"cpu": "50m"}, "limits": {"cpu": "1"}},
                  "terminationGracePeriodSeconds": 5},
    "probes": {"livenessProbe": {"initialDelaySeconds": 0, "periodSeconds": 3},
               "readinessProbe": {"failureThreshold": 1}},
    "serviceAccount": {"serviceAccount": {"create": False, "name": "existing"}},
    "serviceAccountNamed": {"serviceAccount": {"name": "proxy", "annotations": {"a": "b"}}},
    "podMetadata": {"podAnnotations": {"team": "net"}, "podLabels": {"tier": "node"}},
    "extras": {"extraArgs": ["--v=4"], "extraEnv": [{"name": "TZ", "value": "UTC"}]},
}  # fmt: skip


def _validate(obj: Manifest, version: str) -> None:
    if obj["kind"] in ("ServiceMonitor", "PrometheusRule"):  # CRDs: Kubernetes has no schema
        assert obj["apiVersion"] == "monitoring.coreos.com/v1"
        return
    kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("option", OPTIONS)
def test_lints_strictly_and_renders_valid_objects(option: str) -> None:
    values = OPTIONS[option]
    assert lint(values) == []
    objects = render(values)
    own_config = "existingConfigMap" not in values
    assert {"DaemonSet", *(["ConfigMap"] if own_config else [])} <= set(kinds(objects))
    for obj in objects:
        for version in KUBE_VERSIONS:
            _validate(obj, version)


def test_the_validator_rejects_what_kubernetes_would() -> None:
    daemonset = next(obj for obj in render() if obj["kind"] == "DaemonSet")
    broken = copy.deepcopy(daemonset)
    broken["spec"]["template"]["spec"]["hostNetwrok"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(broken, KUBE_VERSIONS[0])


def test_app_version_is_the_package_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == __version__
    image = next(obj for obj in render() if obj["kind"] == "DaemonSet")
    container = image["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == f"localhost/ipvsproxy:{__version__}"


def test_every_value_is_commented() -> None:
    """Each value in values.yaml has a comment just above it or above a block that holds it."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    uncommented = [
        line.strip()
        for number, line in enumerate(lines)
        if _is_value(line) and not any(_commented(lines, at) for at in _key_lines(lines, number))
    ]
    assert uncommented == []


def _is_value(line: str) -> bool:
    """A key with a value on its line (a block opener's values are on the lines below)."""
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#") and not stripped.endswith(":")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" -"))


def _key_lines(lines: list[str], number: int) -> list[int]:
    """The line itself and the lines of the keys that hold it, innermost first."""
    found = [number]
    for at in range(number - 1, -1, -1):
        text = lines[at].strip()
        if text and not text.startswith("#") and _indent(lines[at]) < _indent(lines[found[-1]]):
            found.append(at)
    return found


def _commented(lines: list[str], number: int) -> bool:
    return number > 0 and lines[number - 1].strip().startswith("#")
