"""read_cluster against the fake API server, through the real kubernetes client."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from ipvsproxy.cluster.api import proxy_label_selector, read_cluster
from ipvsproxy.cluster.connection import ApiConnection, ApiError, connect
from ipvsproxy.cluster.source import load_objects, load_snapshot
from ipvsproxy.model import ObjectKey
from ipvsproxy.translate import Settings, translate
from tests.api.fake_apiserver import FakeApiServer, Request

EXAMPLE = Path(__file__).parents[2] / "examples" / "cluster.yaml"
SERVICES_PATH = "/api/v1/services"


def load_example(fake: FakeApiServer) -> list[dict[str, Any]]:
    return [fake.apply(obj) for obj in load_objects(EXAMPLE)]


def as_manifest(objects: list[dict[str, Any]], tmp_path: Path) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"kind": "List", "items": objects}), encoding="utf-8")
    return path


def service(
    name: str, namespace: str = "default", cluster_ip: str = "10.96.1.1", **labels: str
) -> dict[str, Any]:
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


def service_lists(fake: FakeApiServer) -> list[Request]:
    return [r for r in fake.requests if r.path == SERVICES_PATH]


def test_the_api_yields_what_the_file_source_yields_for_the_same_objects(
    fake: FakeApiServer, api: ApiConnection, tmp_path: Path
) -> None:
    stored = load_example(fake)
    from_file, file_rejections = load_snapshot(as_manifest(stored, tmp_path), "node-a")

    read = read_cluster(api, "node-a")

    assert read.snapshot == from_file
    assert read.rejections == file_rejections == []
    assert len(read.snapshot.services) == 5
    assert {key.namespace for key in read.snapshot.services} == {"kube-system", "shop", "data"}
    assert read.services_version == read.endpoint_slices_version == str(fake.resource_version)


def test_pages_of_two_give_every_object_once(fake: FakeApiServer, api: ApiConnection) -> None:
    for index in range(7):
        fake.apply(service(f"svc-{index}", namespace=f"ns-{index % 3}"))

    read = read_cluster(api, "node-a", page_size=2)

    assert len(read.snapshot.services) == 7
    pages = service_lists(fake)
    assert len(pages) == 4
    assert all(page.query["limit"] == "2" for page in pages)
    assert [bool(page.query.get("continue")) for page in pages] == [False, True, True, True]


@pytest.mark.usefixtures("token_expiring_after_first_page")
def test_an_expired_continue_token_restarts_the_list_whole(
    fake: FakeApiServer, api: ApiConnection
) -> None:
    for index in range(5):
        fake.apply(service(f"svc-{index}"))
    read = read_cluster(api, "node-a", page_size=2)

    names = sorted(key.name for key in read.snapshot.services)
    assert names == ["svc-1", "svc-2", "svc-3", "svc-4", "svc-new"]
    pages = service_lists(fake)
    assert len(pages) == 3
    assert "continue" in pages[1].query
    assert "limit" not in pages[2].query and "continue" not in pages[2].query
    assert read.services_version == str(fake.resource_version)


def test_the_selector_skips_headless_and_other_proxies_as_translate_does(
    fake: FakeApiServer, api: ApiConnection, tmp_path: Path
) -> None:
    proxy_label = "service.kubernetes.io/service-proxy-name"
    objects = [
        service("plain"),
        endpoint_slice("plain"),
        service("other-proxy", cluster_ip="10.96.1.2", **{proxy_label: "cilium"}),
        endpoint_slice("other-proxy", **{proxy_label: "cilium"}),
        service("empty-proxy", cluster_ip="10.96.1.3", **{proxy_label: ""}),
        # The EndpointSlice controller labels a headless service's slices, not the service.
        service("headless", cluster_ip="None"),
        endpoint_slice("headless", **{"service.kubernetes.io/headless": ""}),
    ]
    stored = [fake.apply(obj) for obj in objects]

    read = read_cluster(api, "node-a")

    assert set(read.snapshot.services) == {
        ObjectKey("default", "plain"),
        ObjectKey("default", "headless"),
    }
    assert [key.name for key in read.snapshot.endpoint_slices] == ["plain-abcde"]
    assert {r.query["labelSelector"] for r in service_lists(fake)} == {proxy_label_selector()}
    from_file, _ = load_snapshot(as_manifest(stored, tmp_path), "node-a")
    assert translate(read.snapshot, Settings()).virtual_servers == (
        translate(from_file, Settings()).virtual_servers
    )


def test_a_service_proxy_name_selects_only_its_services(
    fake: FakeApiServer, api: ApiConnection
) -> None:
    fake.apply(service("plain"))
    fake.apply(service("mine", **{"service.kubernetes.io/service-proxy-name": "ipvsproxy"}))

    read = read_cluster(api, "node-a", service_proxy_name="ipvsproxy")

    assert set(read.snapshot.services) == {ObjectKey("default", "mine")}


def test_a_missing_node_leaves_node_none_with_a_rejection(
    fake: FakeApiServer, api: ApiConnection
) -> None:
    load_example(fake)

    read = read_cluster(api, "node-z")

    assert read.snapshot.node is None
    assert len(read.snapshot.services) == 5
    assert [r.object for r in read.rejections] == ["Node node-z"]


def test_a_500_is_retried_and_the_list_succeeds(fake: FakeApiServer, api: ApiConnection) -> None:
    load_example(fake)
    fake.fail_next(2, 500)

    read = read_cluster(api, "node-a")

    assert len(read.snapshot.services) == 5
    assert len(service_lists(fake)) == 3


def test_a_429_with_retry_after_is_retried(fake: FakeApiServer, api: ApiConnection) -> None:
    load_example(fake)
    fake.fail_next(1, 429, retry_after=0)

    assert len(read_cluster(api, "node-a").snapshot.services) == 5


def test_retries_are_bounded(fake: FakeApiServer, api: ApiConnection) -> None:
    fake.fail_next(10, 503)

    with pytest.raises(ApiError) as caught:
        read_cluster(api, "node-a")

    assert len(fake.requests) == api.retry.attempts
    assert caught.value.status == 503
    assert str(caught.value) == (
        f"listing Services from the API server at {fake.url}: 503 Service Unavailable: injected"
    )


def test_unauthorized_is_one_line_and_not_retried(fake: FakeApiServer, tmp_path: Path) -> None:
    kubeconfig = fake.write_kubeconfig(tmp_path / "kubeconfig", token="wrong")
    with connect(kubeconfig) as api, pytest.raises(ApiError) as caught:
        read_cluster(api, "node-a")

    assert str(caught.value) == (
        f"listing Services from the API server at {fake.url}: 401 Unauthorized"
    )
    assert len(fake.requests) == 1
