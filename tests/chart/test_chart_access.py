"""RBAC: what a service proxy reads and the events it reports, nothing more; metrics exposure."""

from __future__ import annotations

import helm_python as helm
import pytest

from tests.chart.chart_kit import kinds, notes, only, pod_spec, proxy_container, render, walk


def _rules(objects: list[dict[str, object]]) -> set[tuple[str, str, str]]:
    role = only(objects, "ClusterRole")
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_the_role_grants_reading_services_slices_nodes_and_writing_events_only() -> None:
    reads = {
        (group, resource, verb)
        for group, resource in (
            ("", "services"),
            ("", "nodes"),
            ("discovery.k8s.io", "endpointslices"),
        )
        for verb in ("get", "list", "watch")
    }
    events = {
        (group, "events", verb) for group in ("", "events.k8s.io") for verb in ("create", "patch")
    }
    assert _rules(render()) == reads | events


def test_the_binding_ties_the_role_to_the_pods_service_account() -> None:
    objects = render()
    binding = only(objects, "ClusterRoleBinding")
    account = only(objects, "ServiceAccount")
    assert binding["roleRef"]["name"] == only(objects, "ClusterRole")["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "kube-system"}
    ]
    assert pod_spec(objects)["serviceAccountName"] == account["metadata"]["name"]


def test_an_existing_service_account_gets_no_new_objects() -> None:
    objects = render({"serviceAccount": {"create": False, "name": "kube-proxy"}})
    assert kinds(objects) == ["ConfigMap", "DaemonSet"]
    assert pod_spec(objects)["serviceAccountName"] == "kube-proxy"


def test_no_metrics_service_while_metrics_stay_on_loopback_or_off() -> None:
    for metrics in ({}, {"bindAddress": "127.0.0.2"}, {"bindAddress": "::1"},
                    {"bindAddress": "0.0.0.0", "port": 0}):  # fmt: skip
        objects = render({"metrics": metrics})
        assert "Service" not in kinds(objects)
        assert "metrics" not in {port["name"] for port in proxy_container(objects)["ports"]}


def test_metrics_beyond_loopback_get_a_headless_service_to_every_nodes_port() -> None:
    objects = render({"metrics": {"bindAddress": "0.0.0.0", "port": 10249}})
    service = only(objects, "Service")
    daemonset = only(objects, "DaemonSet")
    pod_labels = daemonset["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= pod_labels.items()
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] == "metrics"
    ports = {p["name"]: p["containerPort"] for p in proxy_container(objects)["ports"]}
    assert ports["metrics"] == port["port"] == 10249


def test_the_service_monitor_scrapes_the_metrics_service() -> None:
    objects = render(
        {"metrics": {"bindAddress": "0.0.0.0", "serviceMonitor": {"enabled": True,
                                                                   "labels": {"release": "prom"}}}}
    )  # fmt: skip
    monitor = only(objects, "ServiceMonitor")
    service = only(objects, "Service")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["kube-system"]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"]
    assert endpoint["path"] == "/metrics"


def test_a_service_monitor_for_loopback_metrics_is_refused_with_the_reason() -> None:
    with pytest.raises(helm.HelmRenderError, match=r"metrics\.bindAddress beyond loopback"):
        render({"metrics": {"serviceMonitor": {"enabled": True}}})


def test_notes_say_how_to_check_the_proxy() -> None:
    text = notes()
    assert "rollout status daemonset/ipvsproxy" in text
    assert "http://127.0.0.1:10256/healthz" in text
    assert "ipvsproxy show" in text
    assert "set apiServer" in text
    assert "http://[fd00::1]:10256/healthz" in notes({"healthz": {"bindAddress": "fd00::1"}})
    assert "set apiServer" not in notes({"apiServer": "https://192.0.2.1:6443"})


def test_no_object_carries_an_empty_or_unrendered_value() -> None:
    for obj in render({"metrics": {"bindAddress": "0.0.0.0"}, "migration": {"enabled": True}}):
        for value in walk(obj):
            assert value is not None, obj["kind"]
            assert not (isinstance(value, str) and "{{" in value), obj["kind"]


def test_the_notes_tell_how_to_take_a_node_over_while_migrating() -> None:
    text = notes({"migration": {"enabled": True}})
    assert "kubectl label node NODE ipvsproxy.io/proxy=ipvsproxy" in text
    assert "kubectl label node NODE ipvsproxy.io/proxy-" in text
    assert "label node" not in notes()
