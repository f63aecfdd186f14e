"""A Reflector's list against the fake API server: page by page, restarts, and relists that
keep the objects that did not change."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from ipvsproxy.cluster.api import SERVICES, Selectors
from ipvsproxy.cluster.connection import ApiConnection
from ipvsproxy.cluster.informer import ClusterInformer, Reflector
from ipvsproxy.cluster.parse import parse_service
from ipvsproxy.model import ObjectKey, Rejection, Service
from tests.api.fake_apiserver import FakeApiServer, Request
from tests.api.test_read_cluster import SERVICES_PATH, service


def services(reflector: Reflector[Service]) -> dict[ObjectKey, Service]:
    return dict(reflector.items()[0])


def rejected(reflector: Reflector[Service]) -> list[str]:
    return sorted(rejection.object for rejection in reflector.items()[1])


def with_bad_port(obj: dict[str, Any]) -> dict[str, Any]:
    """The service with a second port the parser drops (and reports), the first kept."""
    ports = [*obj["spec"]["ports"], {"name": "bad", "port": 70000}]
    return {**obj, "spec": {**obj["spec"], "ports": ports}}


def test_each_page_is_parsed_before_the_next_is_fetched(
    fake: FakeApiServer, api: ApiConnection
) -> None:
    for index in range(5):
        fake.apply(service(f"svc-{index}"))
    parsed: list[str] = []

    def recording_parse(obj: Mapping[str, Any]) -> tuple[Service | None, list[Rejection]]:
        parsed.append(obj["metadata"]["name"])
        return parse_service(obj)

    parsed_when_asked: list[int] = []

    def note(request: Request) -> None:
        if request.path == SERVICES_PATH:
            parsed_when_asked.append(len(parsed))

    fake.on_request = note
    reflector = Reflector(api, SERVICES, recording_parse, selectors=Selectors(), page_size=2)
    reflector.relist()

    assert parsed_when_asked == [0, 2, 4]
    assert sorted(key.name for key in services(reflector)) == [f"svc-{i}" for i in range(5)]
    assert reflector.resource_version == str(fake.resource_version)


@pytest.mark.usefixtures("token_expiring_after_first_page")
def test_a_continue_token_expiring_mid_list_leaves_only_the_restarted_list(
    fake: FakeApiServer, api: ApiConnection
) -> None:
    # svc-0 is on the first page, with a problem reported for it.
    fake.apply(with_bad_port(service("svc-0")))
    for index in range(1, 5):
        fake.apply(service(f"svc-{index}"))
    reflector = ClusterInformer(api, "node-a", page_size=2).services
    reflector.relist()

    names = sorted(key.name for key in services(reflector))
    assert names == ["svc-1", "svc-2", "svc-3", "svc-4", "svc-new"]
    assert rejected(reflector) == []
    assert reflector.resource_version == str(fake.resource_version)


def test_a_relist_keeps_the_parsed_objects_that_did_not_change(
    fake: FakeApiServer, api: ApiConnection
) -> None:
    fake.apply(with_bad_port(service("flawed")))
    for name in ("same", "changed", "deleted"):
        fake.apply(service(name))
    reflector = ClusterInformer(api, "node-a", page_size=2).services
    reflector.relist()
    before = services(reflector)
    assert rejected(reflector) == ["Service default/flawed"]

    fake.apply(service("changed", cluster_ip="10.96.1.2"))
    fake.delete("Service", "default", "deleted")
    fake.apply(service("added"))
    reflector.relist()
    after = services(reflector)

    def key(name: str) -> ObjectKey:
        return ObjectKey("default", name)

    assert sorted(k.name for k in after) == ["added", "changed", "flawed", "same"]
    assert after[key("same")] is before[key("same")]
    assert after[key("flawed")] is before[key("flawed")]
    assert rejected(reflector) == ["Service default/flawed"]
    assert after[key("changed")].cluster_ips == ("10.96.1.2",)
    assert after[key("changed")].resource_version != before[key("changed")].resource_version
