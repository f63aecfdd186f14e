"""read_cluster against the real API server (and, for injected 5xx answers, the fake one),
through the real kubernetes client."""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
import yaml

from ipvsproxy.cluster import connection
from ipvsproxy.cluster.api import (
    SERVICES,
    Selectors,
    list_all,
    list_pages,
    proxy_label_selector,
    read_cluster,
)
from ipvsproxy.cluster.connection import ApiConnection, ApiError, connect
from ipvsproxy.cluster.source import load_objects, load_snapshot
from ipvsproxy.model import ClusterSnapshot, ObjectKey
from ipvsproxy.translate import Settings, translate
from tests.api.fake_apiserver import FakeApiServer, Request
from tests.api.kube import Kube
from tests.controlplane.cluster import SERVICE_CIDR, ControlPlane

EXAMPLE = Path(__file__).parents[2] / "examples" / "cluster.yaml"
SERVICES_PATH = "/api/v1/services"
PROXY_LABEL = "service.kubernetes.io/service-proxy-name"
NODE_PORTS = range(30000, 32768)


def load_example(kube: Kube) -> list[dict[str, Any]]:
    """The example cluster, moved into this test; the objects as the server stored them."""
    return kube.add_all(load_objects(EXAMPLE))


def as_manifest(objects: list[dict[str, Any]], tmp_path: Path) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"kind": "List", "items": objects}), encoding="utf-8")
    return path


def service(
    name: str, namespace: str = "default", cluster_ip: str = "10.96.1.1", **labels: str
) -> dict[str, Any]:
    """A Service; the real server's tests write it without its cluster IP (``Kube.add``)."""
    return {
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"clusterIP": cluster_ip, "ports": [{"name": "http", "port": 80}]},
    }


def endpoint_slice(service_name: str, **labels: str) -> dict[str, Any]:
    return {
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{service_name}-abcde",
            "namespace": "default",
            "labels": {"kubernetes.io/service-name": service_name, **labels},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.244.0.9"]}],
        "ports": [{"name": "http", "port": 8080}],
    }


def in_namespace(snapshot: ClusterSnapshot, namespace: str) -> ClusterSnapshot:
    """The part of a snapshot one test wrote (the server also holds the ``kubernetes``
    Service, and whatever other tests write meanwhile)."""
    return dataclasses.replace(
        snapshot,
        services=MappingProxyType(
            {k: v for k, v in snapshot.services.items() if k.namespace == namespace}
        ),
        endpoint_slices=MappingProxyType(
            {k: v for k, v in snapshot.endpoint_slices.items() if k.namespace == namespace}
        ),
    )


def names(keys: Any, namespace: str) -> list[str]:
    return sorted(key.name for key in keys if key.namespace == namespace)


def observed(api: ApiConnection, on_request: Callable[[Mapping[str, str]], None]) -> ApiConnection:
    """A connection to ``api``'s server that shows each request's query to ``on_request``
    before it sends it."""

    class Observed(ApiConnection):
        def send(self, action: str, request: connection.Request, read_timeout: float) -> Any:
            on_request(request.query)
            return super().send(action, request, read_timeout)

    return Observed(api.configuration, api.timeouts, api.retry)


def before_each_continue(api: ApiConnection, action: Callable[[], None]) -> ApiConnection:
    """A connection to ``api``'s server that runs ``action`` before it asks for a next page
    (once)."""
    done: list[bool] = []

    def maybe_act(query: Mapping[str, str]) -> None:
        if query.get("continue") and not done:
            done.append(True)
            action()

    return observed(api, maybe_act)


def test_the_api_yields_what_the_file_source_yields_for_the_same_objects(
    kube: Kube, real_api: ApiConnection, tmp_path: Path
) -> None:
    stored = load_example(kube)
    node = kube.node_name("node-a")
    from_file, file_rejections = load_snapshot(as_manifest(stored, tmp_path), node)

    read = read_cluster(real_api, node)

    assert in_namespace(read.snapshot, kube.namespace) == from_file
    assert read.rejections == file_rejections == []
    assert names(read.snapshot.services, kube.namespace) == [
        "billing-api",
        "db",
        "gateway",
        "kube-dns",
        "web",
    ]
    assert read.services_version and read.endpoint_slices_version


def test_cluster_ips_and_node_ports_are_the_api_servers_allocations(
    kube: Kube, real_api: ApiConnection
) -> None:
    load_example(kube)

    read = read_cluster(real_api, kube.node_name("node-a"))

    services = {k.name: v for k, v in in_namespace(read.snapshot, kube.namespace).services.items()}
    cidr = ipaddress.ip_network(SERVICE_CIDR)
    allocated = [services[name].cluster_ips for name in ("kube-dns", "web", "gateway")]
    assert all(len(ips) == 1 and ipaddress.ip_address(ips[0]) in cidr for ips in allocated)
    assert len({ips[0] for ips in allocated}) == 3
    assert services["db"].cluster_ips == ("None",)
    assert services["billing-api"].cluster_ips == ()
    assert services["web"].ports[0].node_port in NODE_PORTS
    gateway = services["gateway"]
    assert gateway.ports[0].node_port in NODE_PORTS
    assert gateway.health_check_node_port in NODE_PORTS
    assert [str(i.ip) for i in gateway.load_balancer_ingress] == ["203.0.113.10"]


def test_pages_of_two_give_every_object_once(kube: Kube, real_api: ApiConnection) -> None:
    for index in range(7):
        kube.add(service(f"svc-{index}"))
    selectors = Selectors(labels=proxy_label_selector())

    pages = list(list_pages(real_api, SERVICES, selectors, page_size=2))

    metadata = [item["metadata"] for page in pages for item in page.items]
    listed = [f"{m['namespace']}/{m['name']}" for m in metadata]
    assert len(listed) == len(set(listed))
    assert sorted(n for n in listed if n.startswith(f"{kube.namespace}/")) == [
        f"{kube.namespace}/svc-{index}" for index in range(7)
    ]
    # The kubernetes Service too: eight Services in pages of at most two.
    assert len(pages) >= 4 and all(len(page.items) <= 2 for page in pages)
    assert not any(page.restart for page in pages)
    read = read_cluster(real_api, "node-a", page_size=2)
    assert names(read.snapshot.services, kube.namespace) == [f"svc-{i}" for i in range(7)]


def test_an_expired_continue_token_restarts_the_list_whole(
    kube: Kube, real_api: ApiConnection, control_plane: ControlPlane
) -> None:
    for index in range(5):
        kube.add(service(f"svc-{index}"))
    compacted: list[int] = []

    def cluster_moves_on_and_forgets() -> None:
        kube.delete("Service", "svc-0")
        kube.add(service("svc-new"))
        compacted.append(control_plane.compact())

    api = before_each_continue(real_api, cluster_moves_on_and_forgets)
    pages = list(list_pages(api, SERVICES, Selectors(), page_size=2))

    # The first page was read before the compaction; the next one could not be, and the
    # list was fetched again whole: only what came after is the list.
    assert compacted and not pages[0].restart
    restarted = [page for page in pages if page.restart]
    assert len(restarted) == 1 and restarted[0] is pages[-1]
    final = [i["metadata"]["name"] for i in restarted[0].items]
    assert sorted(n for n in final if n.startswith("svc-")) == [
        "svc-1",
        "svc-2",
        "svc-3",
        "svc-4",
        "svc-new",
    ]
    assert int(restarted[0].resource_version) >= compacted[0]


def test_the_selector_skips_headless_and_other_proxies_as_translate_does(
    kube: Kube, real_api: ApiConnection, tmp_path: Path
) -> None:
    objects = [
        service("plain"),
        endpoint_slice("plain"),
        service("other-proxy", **{PROXY_LABEL: "cilium"}),
        endpoint_slice("other-proxy", **{PROXY_LABEL: "cilium"}),
        service("empty-proxy", **{PROXY_LABEL: ""}),
        # The EndpointSlice controller labels a headless service's slices, not the service.
        service("headless", cluster_ip="None"),
        endpoint_slice("headless", **{"service.kubernetes.io/headless": ""}),
    ]
    stored = kube.add_all(objects)

    read = read_cluster(real_api, "node-a")

    assert names(read.snapshot.services, kube.namespace) == ["headless", "plain"]
    assert names(read.snapshot.endpoint_slices, kube.namespace) == ["plain-abcde"]
    from_file, _ = load_snapshot(as_manifest(stored, tmp_path), "node-a")
    ours = in_namespace(read.snapshot, kube.namespace)
    assert translate(ours, Settings()).virtual_servers == (
        translate(from_file, Settings()).virtual_servers
    )


def test_a_service_proxy_name_selects_only_its_services(
    kube: Kube, real_api: ApiConnection
) -> None:
    kube.add(service("plain"))
    kube.add(service("mine", **{PROXY_LABEL: "ipvsproxy"}))

    read = read_cluster(real_api, "node-a", service_proxy_name="ipvsproxy")

    # Not even the kubernetes Service: it carries no proxy name.
    assert set(read.snapshot.services) == {ObjectKey(kube.namespace, "mine")}


def test_a_missing_node_leaves_node_none_with_a_rejection(
    kube: Kube, real_api: ApiConnection
) -> None:
    load_example(kube)
    missing = kube.node_name("node-z")

    read = read_cluster(real_api, missing)

    assert read.snapshot.node is None
    assert len(in_namespace(read.snapshot, kube.namespace).services) == 5
    assert [r.object for r in read.rejections] == [f"Node {missing}"]


def test_the_own_node_is_read_with_its_addresses(kube: Kube, real_api: ApiConnection) -> None:
    load_example(kube)

    node = read_cluster(real_api, kube.node_name("node-a")).snapshot.node

    assert node is not None and node.zone == "zone-1"
    assert [str(address) for address in node.addresses] == ["192.168.10.11"]


def test_unauthorized_is_one_line_and_not_retried(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    kubeconfig = control_plane.write_kubeconfig(tmp_path / "kubeconfig", token="wrong")
    calls: list[Mapping[str, str]] = []
    with connect(kubeconfig) as api, pytest.raises(ApiError) as caught:
        list_all(observed(api, calls.append), SERVICES, Selectors())

    assert str(caught.value) == (
        f"listing Services from the API server at {control_plane.server}: 401 Unauthorized"
    )
    assert caught.value.status == 401
    assert len(calls) == 1


def service_lists(fake: FakeApiServer) -> list[Request]:
    return [r for r in fake.requests if r.path == SERVICES_PATH]


def test_a_500_is_retried_and_the_list_succeeds(fake: FakeApiServer, api: ApiConnection) -> None:
    """Needs the fake: a real API server answers 500 only when broken, never on demand."""
    for obj in load_objects(EXAMPLE):
        fake.apply(obj)
    fake.fail_next(2, 500)

    read = read_cluster(api, "node-a")

    assert len(read.snapshot.services) == 5
    assert len(service_lists(fake)) == 3


def test_a_429_with_retry_after_is_retried(fake: FakeApiServer, api: ApiConnection) -> None:
    """Needs the fake: a real API server sends 429 and Retry-After only when overloaded."""
    for obj in load_objects(EXAMPLE):
        fake.apply(obj)
    fake.fail_next(1, 429, retry_after=0)

    assert len(read_cluster(api, "node-a").snapshot.services) == 5


def test_retries_are_bounded(fake: FakeApiServer, api: ApiConnection) -> None:
    """Needs the fake: a real API server answers 503 only while unready, never on demand."""
    fake.fail_next(10, 503)

    with pytest.raises(ApiError) as caught:
        read_cluster(api, "node-a")

    assert len(fake.requests) == api.retry.attempts
    assert caught.value.status == 503
    assert str(caught.value) == (
        f"listing Services from the API server at {fake.url}: 503 Service Unavailable: injected"
    )
