"""Labelled counters the alerts read start at 0, so their first event is an increase."""

from __future__ import annotations

import ast
from pathlib import Path

from ipvsproxy.daemon.metrics import SYNC_RESULTS, Metrics
from ipvsproxy.model import SkipReason
from ipvsproxy.reconcile import drift
from ipvsproxy.reconcile.drift import DRIFT_KINDS


def test_counters_the_alerts_read_are_there_at_zero_before_their_first_event() -> None:
    registry = Metrics().registry
    for reason in SkipReason:
        value = registry.get_sample_value("ipvsproxy_objects_skipped_total", {"reason": reason})
        assert value == 0.0, reason
    for kind in DRIFT_KINDS:
        assert registry.get_sample_value("ipvsproxy_drift_repairs_total", {"kind": kind}) == 0.0
    for result in SYNC_RESULTS:
        labels = {"mode": "full", "result": result}
        assert registry.get_sample_value("ipvsproxy_syncs_total", labels) == 0.0


def test_every_kind_of_drift_counted_is_one_the_metric_starts_with() -> None:
    tree = ast.parse(Path(drift.__file__).read_text())
    counted = {
        node.slice.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and node.value.id == "drift"
        and isinstance(node.slice, ast.Constant)
    }
    assert counted == set(DRIFT_KINDS)
