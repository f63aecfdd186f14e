from __future__ import annotations

from typing import Any

import pytest

from tests.unit.test_translate_rules import reals, run, svc, vs


def hinted(address: str, zones: list[str] | None, ready: bool = True) -> dict[str, Any]:
    endpoint: dict[str, Any] = {"addresses": [address], "conditions": {"ready": ready}}
    if zones is not None:
        endpoint["hints"] = {"forZones": [{"name": zone} for zone in zones]}
    return endpoint


def slice_of(endpoints: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "kind": "EndpointSlice",
        "metadata": {"name": "e", "namespace": "ns", "labels": {"kubernetes.io/service-name": "s"}},
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "p", "port": 8080}],
    }


@pytest.mark.parametrize(
    ("endpoints", "expected"),
    [
        # our node is in z1: hints for z1 are honoured
        ([hinted("10.1.0.1", ["z1"]), hinted("10.1.0.2", ["z2"])], {"10.1.0.1:8080"}),
        # one ready endpoint lacks hints: ignore hints
        (
            [hinted("10.1.0.1", ["z1"]), hinted("10.1.0.2", None)],
            {"10.1.0.1:8080", "10.1.0.2:8080"},
        ),
        # an unready endpoint without hints does not disable them
        (
            [
                hinted("10.1.0.1", ["z1"]),
                hinted("10.1.0.2", ["z2"]),
                hinted("10.1.0.3", None, False),
            ],
            {"10.1.0.1:8080"},
        ),
        # no hint names our zone: ignore hints
        (
            [hinted("10.1.0.1", ["z2"]), hinted("10.1.0.2", ["z3"])],
            {"10.1.0.1:8080", "10.1.0.2:8080"},
        ),
    ],
)
def test_zone_hints(endpoints: list[dict[str, Any]], expected: set[str]) -> None:
    state = run([svc({"trafficDistribution": "PreferClose"}), slice_of(endpoints)])
    assert reals(state, vs("TCP", "10.96.0.1", 80)) == expected


def node_hinted(address: str, nodes: list[str] | None, zones: list[str]) -> dict[str, Any]:
    endpoint = hinted(address, zones)
    if nodes is not None:
        endpoint["hints"]["forNodes"] = [{"name": node} for node in nodes]
    return endpoint


@pytest.mark.parametrize(
    ("endpoints", "expected"),
    [
        # every ready endpoint has node hints and one names node-a: same node wins over zone
        (
            [node_hinted("10.1.0.1", ["node-a"], ["z1"]), node_hinted("10.1.0.2", ["n2"], ["z1"])],
            {"10.1.0.1:8080"},
        ),
        # one lacks node hints: fall back to zone hints
        (
            [
                node_hinted("10.1.0.1", ["node-a"], ["z1"]),
                node_hinted("10.1.0.2", None, ["z1"]),
                node_hinted("10.1.0.3", ["n3"], ["z2"]),
            ],
            {"10.1.0.1:8080", "10.1.0.2:8080"},
        ),
        # no node hint names node-a: zone hints
        (
            [node_hinted("10.1.0.1", ["n1"], ["z1"]), node_hinted("10.1.0.2", ["n2"], ["z2"])],
            {"10.1.0.1:8080"},
        ),
    ],
)
def test_node_hints(endpoints: list[dict[str, Any]], expected: set[str]) -> None:
    state = run([svc({"trafficDistribution": "PreferSameNode"}), slice_of(endpoints)])
    assert reals(state, vs("TCP", "10.96.0.1", 80)) == expected
