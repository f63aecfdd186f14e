"""The traffic counters' text: what prometheus_client would write for the same totals."""

from __future__ import annotations

import io
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from ipvsproxy.cluster.source import load_snapshot
from ipvsproxy.daemon.traffic_metrics import FAMILIES, Row, totals, write_text
from ipvsproxy.model import TrafficStats, VirtualServer, VirtualServerState
from ipvsproxy.translate import Settings, translate

LABELS = ["namespace", "service", "port", "protocol"]


class _Reference(Collector):
    """The same rows through prometheus_client's own families."""

    def __init__(self, rows: list[Row]) -> None:
        self._rows = rows

    def collect(self) -> Iterable[Metric]:
        made: list[Metric] = []
        for name, help_text, first, directions in FAMILIES:
            family = CounterMetricFamily(
                name, help_text, labels=[*LABELS, "direction"] if directions else LABELS
            )
            for (namespace, service, port, protocol), counts in self._rows:
                labels = [namespace, service, port, protocol]
                if directions:
                    family.add_metric([*labels, "in"], counts[first])
                    family.add_metric([*labels, "out"], counts[first + 1])
                else:
                    family.add_metric(labels, counts[first])
            made.append(family)
        return made


def _parsed(text: bytes) -> list[tuple[str, str, str, list[tuple[str, dict[str, str], float]]]]:
    return [
        (f.name, f.documentation, f.type, [(s.name, s.labels, s.value) for s in f.samples])
        for f in text_string_to_metric_families(text.decode())
    ]


LABEL = st.text(st.characters(blacklist_categories=["Cs"]), max_size=12)
ROWS = st.dictionaries(
    st.tuples(LABEL, LABEL, LABEL, LABEL),
    st.lists(st.integers(0, 2**63), min_size=5, max_size=5),
    max_size=6,
).map(lambda found: sorted(found.items()))


@given(ROWS)
def test_the_text_is_prometheus_clients_for_the_same_totals(rows: list[Row]) -> None:
    registry = CollectorRegistry()
    registry.register(_Reference(rows))
    written = io.BytesIO()
    write_text(written, rows)
    ours = written.getvalue()

    assert _parsed(ours) == _parsed(generate_latest(registry))
    assert ours == generate_latest(registry)


def test_totals_sum_each_service_ports_virtual_servers_and_skip_the_unowned() -> None:
    snapshot, _ = load_snapshot(Path("examples/cluster.yaml"), "node-a")
    desired = translate(snapshot, Settings())
    counted = [
        VirtualServerState(wanted.server, {}, TrafficStats(1, 2, 3, 4, 5))
        for wanted in desired.virtual_servers.values()
    ]
    first = next(iter(desired.virtual_servers.values()))
    stranger = replace(first.server.key, port=first.server.key.port + 1000)
    unowned = VirtualServerState(VirtualServer(stranger), {}, TrafficStats(9, 9, 9, 9, 9))

    found = dict(totals(iter([*counted, unowned]), desired))

    per_port: dict[tuple[str, str, str, str], int] = {}
    for wanted in desired.virtual_servers.values():
        owner = wanted.owner
        key = (owner.service.namespace, owner.service.name, owner.port_name, owner.protocol.value)
        per_port[key] = per_port.get(key, 0) + 1
    assert found == {key: [n, 2 * n, 3 * n, 4 * n, 5 * n] for key, n in per_port.items()}
    assert totals(counted, None) == []
