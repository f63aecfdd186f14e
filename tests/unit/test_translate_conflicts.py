"""Services that claim the same virtual server: settled per virtual server, never per service."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from ipvsproxy.cluster.parse import snapshot_from_objects
from ipvsproxy.cluster.source import load_objects
from ipvsproxy.model import AddressKind, DesiredState, ObjectKey, SkipReason
from ipvsproxy.translate import Settings, translate
from tests.unit.test_translate_rules import EXAMPLE, run, svc, vs


def example_with(*extra: dict[str, Any]) -> DesiredState:
    snapshot, _ = snapshot_from_objects([*load_objects(EXAMPLE), *extra], "node-a")
    return translate(snapshot, Settings())


EVIL = {
    "kind": "Service",
    "metadata": {"name": "evil", "namespace": "aaa"},
    "spec": {
        "clusterIP": "10.96.99.99",
        "externalIPs": ["10.96.0.10"],
        "ports": [{"name": "metrics", "port": 9153, "protocol": "TCP"}],
    },
}


def test_an_external_ip_on_kube_dns_takes_nothing_from_kube_dns() -> None:
    """The issue's reproduction: aaa/evil sorts first and used to remove kube-dns whole."""
    state = example_with(EVIL)
    alone = example_with()
    for key, wanted in alone.virtual_servers.items():
        if str(wanted.owner.service) == "kube-system/kube-dns":
            assert state.virtual_servers[key] == wanted
    metrics = state.virtual_servers[vs("TCP", "10.96.0.10", 9153)]
    assert str(metrics.owner) == "kube-system/kube-dns:metrics"
    assert metrics.kind is AddressKind.CLUSTER_IP
    # The rest of the evil service is still programmed: only the losing virtual server goes.
    assert vs("TCP", "10.96.99.99", 9153) in state.virtual_servers
    [lost] = [r for r in state.rejections if r.category is SkipReason.ADDRESS_CONFLICT]
    assert lost.object == "Service aaa/evil"
    assert lost.reason == (
        "TCP 10.96.0.10:9153 (ExternalIP) is also Service kube-system/kube-dns's (ClusterIP); "
        "kube-system/kube-dns keeps it, as an address the API server allocates wins over one "
        "a user writes"
    )
    assert state.skipped_by_reason()[SkipReason.ADDRESS_CONFLICT] == 1


def _aged(name: str, created: str | None, spec: dict[str, Any]) -> dict[str, Any]:
    obj = svc(spec, name=name)
    if created is not None:
        obj["metadata"]["creationTimestamp"] = created
    return obj


OLD, NEW = "2024-01-01T00:00:00Z", "2025-06-01T00:00:00Z"


@pytest.mark.parametrize(
    ("field", "spec_a", "spec_b", "key"),
    [
        (
            "clusterIP",
            {"clusterIP": "10.96.0.5"},
            {"clusterIP": "10.96.0.5", "ports": [{"name": "p", "port": 80}, {"port": 81}]},
            ("10.96.0.5", 80),
        ),
        (
            "nodePort",
            {"type": "NodePort", "ports": [{"name": "p", "port": 80, "nodePort": 30080}]},
            {
                "type": "NodePort",
                "clusterIP": "10.96.0.2",
                "ports": [{"name": "p", "port": 80, "nodePort": 30080}],
            },
            ("192.168.0.1", 30080),
        ),
    ],
)
@pytest.mark.parametrize("order", ["older first by name", "older last by name"])
def test_between_equals_the_older_service_keeps_the_virtual_server(
    field: str, spec_a: dict[str, Any], spec_b: dict[str, Any], key: tuple[str, int], order: str
) -> None:
    older, newer = ("a-old", "z-new") if order == "older first by name" else ("z-old", "a-new")
    state = run([_aged(older, OLD, spec_a), _aged(newer, NEW, spec_b)])
    assert state.virtual_servers[vs("TCP", *key)].owner.service == _key(older)
    [lost] = [r for r in state.rejections if r.category is SkipReason.ADDRESS_CONFLICT]
    assert lost.object == f"Service ns/{newer}"
    assert lost.reason.endswith(f"ns/{older} keeps it, as the older service wins")
    # The newer service keeps everything else it has.
    assert any(w.owner.service == _key(newer) for w in state.virtual_servers.values())


def _key(name: str) -> ObjectKey:
    return ObjectKey("ns", name)


def test_same_age_falls_back_to_the_name_and_unknown_age_counts_as_newest() -> None:
    same = run([_aged("b", OLD, {}), _aged("a", OLD, {})])
    assert same.virtual_servers[vs("TCP", "10.96.0.1", 80)].owner.service == _key("a")
    unknown = run([_aged("a", None, {}), _aged("b", NEW, {})])
    assert unknown.virtual_servers[vs("TCP", "10.96.0.1", 80)].owner.service == _key("b")


def test_a_load_balancer_ingress_loses_to_a_cluster_ip_however_old() -> None:
    lb = _aged(
        "lb",
        OLD,
        {"type": "LoadBalancer", "clusterIP": "10.96.0.7"},
    )
    lb["status"] = {"loadBalancer": {"ingress": [{"ip": "10.96.0.5"}]}}
    state = run([lb, _aged("plain", NEW, {"clusterIP": "10.96.0.5"})])
    assert state.virtual_servers[vs("TCP", "10.96.0.5", 80)].owner.service == _key("plain")
    assert state.virtual_servers[vs("TCP", "10.96.0.5", 80)].kind is AddressKind.CLUSTER_IP
    assert vs("TCP", "10.96.0.7", 80) in state.virtual_servers


def test_a_losing_external_ip_is_not_bound_for_the_loser_but_stays_for_the_winner() -> None:
    state = example_with(EVIL)
    assert state.bound_addresses == example_with().bound_addresses | {
        vs("TCP", "10.96.99.99", 1).address
    }


def test_the_winner_does_not_change_whatever_order_services_arrive_in() -> None:
    objects = [_aged("x", NEW, {}), _aged("y", OLD, {}), _aged("z", None, {})]
    first = run(objects)
    assert run(list(reversed(objects))).virtual_servers == first.virtual_servers
    assert first.virtual_servers[vs("TCP", "10.96.0.1", 80)].owner.service == _key("y")


def test_external_ips_outside_the_allowed_ranges_are_ignored_with_a_warning() -> None:
    allowed = Settings(external_ip_ranges=(ipaddress.ip_network("203.0.113.0/24"),))
    spec = {"externalIPs": ["203.0.113.9", "198.51.100.9"]}
    state = run([svc(spec)], allowed)
    assert vs("TCP", "203.0.113.9", 80) in state.virtual_servers
    assert vs("TCP", "198.51.100.9", 80) not in state.virtual_servers
    [skipped] = [r for r in state.rejections if r.category is SkipReason.EXTERNAL_IP_NOT_ALLOWED]
    assert skipped.reason == (
        "externalIP 198.51.100.9 is outside --service-external-ip-range; ignored"
    )
    # Without the option, kube-proxy's behaviour: any external IP.
    assert vs("TCP", "198.51.100.9", 80) in run([svc(spec)]).virtual_servers
