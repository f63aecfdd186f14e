"""values.schema.json turns a wrong value into an install error naming it, before any pod runs."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import pytest

from tests.chart.chart_kit import render

REJECTED: dict[str, tuple[dict[str, Any], str]] = {
    "unknown scheduler": ({"ipvs": {"scheduler": "roundrobin"}}, "/ipvs/scheduler"),
    "scheduler not a string": ({"ipvs": {"scheduler": 1}}, "/ipvs/scheduler"),
    "strictARP as text": ({"ipvs": {"strictARP": "yes"}}, "/ipvs/strictARP"),
    "CIDRs as one string": ({"ipvs": {"excludeCIDRs": "10.0.0.0/8"}}, "/ipvs/excludeCIDRs"),
    "sync period without unit": ({"ipvs": {"syncPeriod": "30"}}, "/ipvs/syncPeriod"),
    "sync period as number": ({"ipvs": {"minSyncPeriod": 1}}, "/ipvs/minSyncPeriod"),
    "misspelt key": ({"ipvs": {"schedular": "rr"}}, "schedular"),
    "unknown top-level key": ({"hostNetwork": False}, "hostNetwork"),
    "healthz port as text": ({"healthz": {"port": "10256"}}, "/healthz/port"),
    "healthz port 0": ({"healthz": {"port": 0}}, "/healthz/port"),
    "metrics port too big": ({"metrics": {"port": 70000}}, "/metrics/port"),
    "unknown local mode": ({"detectLocalMode": "LocalCIDR"}, "/detectLocalMode"),
    "unknown log format": ({"logging": {"format": "logfmt"}}, "/logging/format"),
    "negative verbosity": ({"logging": {"verbosity": -1}}, "/logging/verbosity"),
    "privileged as text": ({"privileged": "true"}, "/privileged"),
    "the cleanup init container, gone": ({"cleanupKubeProxy": True}, "cleanupKubeProxy"),
    "migration switch as text": ({"migration": {"enabled": "yes"}}, "/migration/enabled"),
    "migration label not a label": ({"migration": {"nodeLabel": "a b"}}, "/migration/nodeLabel"),
    "maxUnavailable 0": ({"maxUnavailable": 0}, "/maxUnavailable"),
    "maxUnavailable not a percentage": ({"maxUnavailable": "ten"}, "/maxUnavailable"),
    "apiServer without scheme": ({"apiServer": "10.0.0.1:6443"}, "/apiServer"),
    "pull policy": ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
    "node selector value": ({"nodeSelector": {"os": True}}, "/nodeSelector"),
    "extra arg not a flag": ({"extraArgs": ["sync"]}, "/extraArgs"),
    "nodePortAddresses as string": ({"nodePortAddresses": "primary"}, "/nodePortAddresses"),
}


@pytest.mark.parametrize("case", REJECTED)
def test_wrong_values_are_rejected_naming_the_value(case: str) -> None:
    values, named = REJECTED[case]
    with pytest.raises(helm.HelmValuesError) as rejected:
        render(values)
    assert named in str(rejected.value)


@pytest.mark.parametrize("value", [1, "25%", "100%"])
def test_max_unavailable_takes_a_count_or_a_percentage(value: int | str) -> None:
    render({"maxUnavailable": value})
