"""A Reflector's list against the real API server: page by page, restarts, and relists that
keep the objects that did not change."""

from __future__ import annotations

import gc
from collections.abc import Mapping
from typing import Any

from ipvsproxy.cluster.api import SERVICES, Selectors
from ipvsproxy.cluster.connection import ApiConnection
from ipvsproxy.cluster.informer import ClusterInformer, Reflector
from ipvsproxy.cluster.parse import parse_service
from ipvsproxy.model import ObjectKey, Rejection, Service
from tests.api.kube import Kube
from tests.api.test_read_cluster import before_each_continue, endpoint_slice, observed, service
from tests.controlplane.cluster import ControlPlane


def mine(reflector: Reflector[Any], namespace: str) -> dict[ObjectKey, Any]:
    return {k: v for k, v in reflector.items()[0].items() if k.namespace == namespace}


def rejected(reflector: Reflector[Any]) -> list[str]:
    return sorted(rejection.object for rejection in reflector.items()[1])


def with_endpoint(obj: dict[str, Any], address: str) -> dict[str, Any]:
    return {**obj, "endpoints": [{"addresses": [address]}]}


def test_each_page_is_parsed_before_the_next_is_fetched(
    kube: Kube, real_api: ApiConnection
) -> None:
    for index in range(5):
        kube.add(service(f"svc-{index}"))
    parsed: list[str] = []
    calls: list[tuple[Mapping[str, str], int]] = []

    def recording_parse(obj: Mapping[str, Any]) -> tuple[Service | None, list[Rejection]]:
        parsed.append(obj["metadata"]["name"])
        return parse_service(obj)

    api = observed(real_api, lambda query: calls.append((query, len(parsed))))
    reflector = Reflector(api, SERVICES, recording_parse, selectors=Selectors(), page_size=2)
    reflector.relist()

    # Five Services and the kubernetes one: three pages, each parsed before the next.
    assert [parsed_before for _, parsed_before in calls] == [0, 2, 4]
    assert [query.get("limit") for query, _ in calls] == ["2", "2", "2"]
    assert [bool(query.get("continue")) for query, _ in calls] == [False, True, True]
    assert sorted(key.name for key in mine(reflector, kube.namespace)) == [
        f"svc-{i}" for i in range(5)
    ]
    newest = max(int(obj["metadata"]["resourceVersion"]) for obj in kube.list_items("Service"))
    assert int(reflector.resource_version) >= newest


def test_a_continue_token_expiring_mid_list_leaves_only_the_restarted_list(
    kube: Kube, real_api: ApiConnection, control_plane: ControlPlane
) -> None:
    # svc-0 is on the first page, after default/kubernetes.
    for index in range(5):
        kube.add(service(f"svc-{index}"))

    def cluster_moves_on_and_forgets() -> None:
        kube.delete("Service", "svc-0")
        kube.add(service("svc-new"))
        control_plane.compact()

    api = before_each_continue(real_api, cluster_moves_on_and_forgets)
    reflector = ClusterInformer(api, "node-a", page_size=2).services
    reflector.relist()

    names = sorted(key.name for key in mine(reflector, kube.namespace))
    assert names == ["svc-1", "svc-2", "svc-3", "svc-4", "svc-new"]
    assert ObjectKey("default", "kubernetes") in reflector.items()[0]


def test_a_relist_keeps_the_parsed_objects_that_did_not_change(
    kube: Kube, real_api: ApiConnection
) -> None:
    # The API server takes a broadcast endpoint address; the parser drops it, with a reason.
    kube.add(with_endpoint(endpoint_slice("flawed"), "255.255.255.255"))
    for name in ("same", "changed", "deleted"):
        kube.add(endpoint_slice(name))
    reflector = ClusterInformer(real_api, "node-a", page_size=2).endpoint_slices
    reflector.relist()
    before = mine(reflector, kube.namespace)
    flawed = f"EndpointSlice {kube.namespace}/flawed-abcde"
    assert rejected(reflector) == [flawed]

    kube.add(with_endpoint(endpoint_slice("changed"), "10.244.0.10"))
    kube.delete("EndpointSlice", "deleted-abcde")
    kube.add(endpoint_slice("added"))
    reflector.relist()
    after = mine(reflector, kube.namespace)

    def key(name: str) -> ObjectKey:
        return ObjectKey(kube.namespace, f"{name}-abcde")

    assert sorted(k.name for k in after) == [
        "added-abcde",
        "changed-abcde",
        "flawed-abcde",
        "same-abcde",
    ]
    assert after[key("same")] is before[key("same")]
    assert after[key("flawed")] is before[key("flawed")]
    assert rejected(reflector) == [flawed]
    assert after[key("changed")].endpoints[0].addresses == ("10.244.0.10",)
    assert after[key("changed")].resource_version != before[key("changed")].resource_version


def test_a_relist_keeps_what_it_parsed_out_of_later_collections(
    kube: Kube, real_api: ApiConnection
) -> None:
    kube.add(service("svc-0"))
    gc.unfreeze()
    reflector = Reflector(real_api, SERVICES, parse_service, selectors=Selectors())
    reflector.relist()

    parsed = mine(reflector, kube.namespace)[ObjectKey(kube.namespace, "svc-0")]
    assert gc.get_freeze_count() > 0
    assert not any(obj is parsed for gen in range(3) for obj in gc.get_objects(gen))
