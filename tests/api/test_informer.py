"""ClusterInformer against the real API server: lists, watches, bookmarks, 410 Gone after a
compaction, selectors, a restart; and, on the fake one, the faults a real server cannot be made
to produce (dropped, stalled and failing streams)."""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ipvsproxy.cluster.api import read_cluster
from ipvsproxy.cluster.connection import ApiConnection, Timeouts, connect
from ipvsproxy.cluster.informer import Backoff, InformerHooks
from ipvsproxy.cluster.source import load_objects
from ipvsproxy.model import ChangedKeys, ObjectKey
from tests.api.conftest import FAST_RETRY
from tests.api.fake_apiserver import SERVICE, FakeApiServer, query_flag
from tests.api.informer_kit import PeekingInformer
from tests.api.kube import Kube
from tests.api.test_read_cluster import EXAMPLE, PROXY_LABEL, endpoint_slice, load_example, service

# Waiting for the informer to catch up is bounded, and fails the test if it never does.
PATIENCE = 20.0
FAST_BACKOFF = Backoff(initial=0.05, maximum=0.2)


class Changes:
    """Wakes a waiting test whenever the informer reports a change."""

    def __init__(self) -> None:
        self._changed = threading.Condition()

    def notify(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def wait_until(self, predicate: Callable[[], bool]) -> bool:
        deadline = time.monotonic() + PATIENCE
        with self._changed:
            while not predicate():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                # Also polls: some predicates read what notifies no one (versions, requests).
                self._changed.wait(min(remaining, 0.1))
        return True


class _Counter(Counter[str]):
    def update_one(self, key: str) -> None:
        self[key] += 1


class Hooks:
    """What the informer reported, by resource."""

    def __init__(self) -> None:
        self.changed, self.relisted, self.restarted = _Counter(), _Counter(), _Counter()

    def hooks(self) -> InformerHooks:
        return InformerHooks(
            changed=self.changed.update_one,
            relisted=self.relisted.update_one,
            watch_restarted=self.restarted.update_one,
        )


@pytest.fixture
def changes() -> Changes:
    return Changes()


@pytest.fixture
def hooks() -> Hooks:
    return Hooks()


@pytest.fixture
def start(
    kube: Kube, real_api: ApiConnection, changes: Changes, hooks: Hooks
) -> Iterator[Callable[..., PeekingInformer]]:
    """Start an informer for this test's node-a on the real server, stopped after the test."""
    started: list[PeekingInformer] = []

    def begin(**options: Any) -> PeekingInformer:
        settings: dict[str, Any] = {
            "page_size": 2,
            "watch_timeout": 5,
            "backoff": FAST_BACKOFF,
            "on_change": changes.notify,
            "hooks": hooks.hooks(),
            **options,
        }
        informer = PeekingInformer(real_api, kube.node_name("node-a"), **settings)
        started.append(informer)
        informer.start()
        assert informer.wait_for_sync(PATIENCE)
        return informer

    yield begin
    for informer in started:
        informer.stop()


@pytest.fixture
def informer(kube: Kube, start: Callable[..., PeekingInformer]) -> PeekingInformer:
    load_example(kube)
    return start()


def has_service(informer: PeekingInformer, key: ObjectKey) -> bool:
    return key in informer.snapshot()[0].services


def web_port(informer: PeekingInformer, namespace: str) -> int | None:
    """The web service's only port, None when it has none (or the service is gone)."""
    web = informer.snapshot()[0].services.get(ObjectKey(namespace, "web"))
    return web.ports[0].port if web is not None and web.ports else None


def example(kind: str, name: str) -> dict[str, Any]:
    return next(
        o for o in load_objects(EXAMPLE) if o["kind"] == kind and o["metadata"]["name"] == name
    )


def with_port(obj: dict[str, Any], port: int) -> dict[str, Any]:
    spec = {**obj["spec"], "ports": [{**obj["spec"]["ports"][0], "port": port}]}
    return {**obj, "spec": spec}


def same_as_one_read(informer: PeekingInformer, api: ApiConnection) -> bool:
    read = read_cluster(api, informer.node_name)
    return informer.snapshot() == (read.snapshot, read.rejections)


def catches_up_with_a_new_service(
    kube: Kube, informer: PeekingInformer, changes: Changes, api: ApiConnection
) -> bool:
    """A Service added now reaches the informer, which then holds what one read holds."""
    kube.add(service("added-last"))
    added = ObjectKey(kube.namespace, "added-last")
    return changes.wait_until(lambda: has_service(informer, added)) and changes.wait_until(
        lambda: same_as_one_read(informer, api)
    )


def test_the_informer_starts_from_the_same_view_as_one_read(
    informer: PeekingInformer, real_api: ApiConnection, kube: Kube, hooks: Hooks
) -> None:
    assert same_as_one_read(informer, real_api)
    assert informer.snapshot()[0].node is not None
    assert len([k for k in informer.snapshot()[0].services if k.namespace == kube.namespace]) == 5
    # Each resource listed once, in pages of two.
    assert hooks.changed == {"services": 1, "endpointslices": 1, "nodes": 1}


def test_added_modified_and_deleted_objects_are_applied(
    kube: Kube,
    informer: PeekingInformer,
    changes: Changes,
    real_api: ApiConnection,
    hooks: Hooks,
) -> None:
    kube.add(service("new"))
    kube.add(with_port(example("Service", "web"), 8080))
    kube.delete("Service", "db")
    kube.delete("EndpointSlice", "db-h5v1n")

    assert changes.wait_until(
        lambda: (
            has_service(informer, ObjectKey(kube.namespace, "new"))
            and web_port(informer, kube.namespace) == 8080
            and not has_service(informer, ObjectKey(kube.namespace, "db"))
        )
    )
    assert not hooks.relisted
    assert changes.wait_until(lambda: same_as_one_read(informer, real_api))


def test_a_taken_snapshot_names_the_objects_the_watch_touched_since_the_last(
    kube: Kube, informer: PeekingInformer, changes: Changes
) -> None:
    web, db_slice = ObjectKey(kube.namespace, "web"), ObjectKey(kube.namespace, "db-h5v1n")
    # Right after the list, anything may have changed.
    first, _, changed = informer.take_snapshot()
    assert changed is None and web in first.services
    kube.add(with_port(example("Service", "web"), 8080))
    kube.delete("EndpointSlice", "db-h5v1n")
    assert changes.wait_until(lambda: web_port(informer, kube.namespace) == 8080)
    assert changes.wait_until(lambda: db_slice not in informer.snapshot()[0].endpoint_slices)
    # ``snapshot`` leaves the touched keys for ``take_snapshot``, which takes them once.
    snapshot, _, changed = informer.take_snapshot()
    assert changed == ChangedKeys(frozenset({web}), frozenset({db_slice}))
    assert snapshot.services[web].ports[0].port == 8080
    assert informer.take_snapshot()[2] == ChangedKeys(frozenset(), frozenset())


def test_a_bookmark_moves_the_version_past_changes_the_watch_does_not_see(
    kube: Kube,
    start: Callable[..., PeekingInformer],
    changes: Changes,
    hooks: Hooks,
    real_api: ApiConnection,
) -> None:
    kube.add(endpoint_slice("web"))
    # Watches of 3-6 s: the API server sends a bookmark 2 s before a watch's end.
    informer = start(watch_timeout=3)
    slices_version = int(informer.endpoint_slices.resource_version)
    # A change the EndpointSlice watch does not carry moves the cluster's version past it.
    moved = int(kube.add(service("elsewhere"))["metadata"]["resourceVersion"])
    assert moved > slices_version
    # The watch cache learns of etcd's progress when a consistent list needs it (any client's).
    read_cluster(real_api, informer.node_name)

    assert changes.wait_until(lambda: int(informer.endpoint_slices.resource_version) >= moved)
    assert hooks.changed["endpointslices"] == 1
    # The re-watch starts from the bookmark, and still sees what comes next.
    kube.add({**endpoint_slice("web"), "endpoints": [{"addresses": ["10.244.0.10"]}]})
    key = ObjectKey(kube.namespace, "web-abcde")
    assert changes.wait_until(
        lambda: (
            informer.snapshot()[0].endpoint_slices[key].endpoints[0].addresses == ("10.244.0.10",)
        )
    )
    assert not hooks.relisted


def test_a_compaction_makes_the_uncached_services_watch_relist_and_catch_up(
    kube: Kube,
    start: Callable[..., PeekingInformer],
    changes: Changes,
    hooks: Hooks,
    real_api: ApiConnection,
) -> None:
    control_plane = kube.control_plane
    load_example(kube)
    # Watches of 2-4 s: the re-watch after the compaction comes soon.
    informer = start(watch_timeout=2)
    before = ObjectKey(kube.namespace, "before")
    kube.add(service("before"))
    assert changes.wait_until(lambda: has_service(informer, before))
    informer.take_snapshot()
    # The services watch's version is now older than what the compaction keeps (a watch
    # from version N reads from N + 1: two changes it does not see put N + 1 out of reach).
    kube.add(endpoint_slice("before"))
    kube.add(endpoint_slice("other"))
    control_plane.compact()

    # Its next watch gets 410 Gone and the informer lists again; the cached watches of
    # EndpointSlices and Nodes never notice the compaction.
    assert changes.wait_until(lambda: hooks.relisted == {"services": 1})
    assert informer.take_snapshot()[2] is None
    assert catches_up_with_a_new_service(kube, informer, changes, real_api)
    assert hooks.relisted == {"services": 1}


def test_a_restart_with_changes_it_never_saw_relists_and_catches_up(
    kube: Kube,
    start: Callable[..., PeekingInformer],
    changes: Changes,
    hooks: Hooks,
    real_api: ApiConnection,
) -> None:
    control_plane = kube.control_plane
    load_example(kube)
    informer = start()
    assert hooks.changed == {"services": 1, "endpointslices": 1, "nodes": 1}
    db = ObjectKey(kube.namespace, "db")
    assert has_service(informer, db)

    # It dies (a graceful stop takes seconds more and would change nothing here).
    control_plane.stop_apiserver(signal.SIGKILL)
    try:
        # While it is down, another API server of the cluster deletes a Service and its
        # slice, and etcd's history is compacted past them.
        deleted = control_plane.etcd_delete(f"/registry/services/specs/{kube.namespace}/db")
        deleted += control_plane.etcd_delete(f"/registry/endpointslices/{kube.namespace}/db-h5v1n")
        assert deleted == 2
        control_plane.compact()
    finally:
        control_plane.start_apiserver()

    assert changes.wait_until(lambda: not has_service(informer, db))
    # Not the Services watch alone: the new server's watch cache starts from etcd as it is
    # now, and a watch from any older version, cached or not, gets 410 Gone.
    everything = {"services": 1, "endpointslices": 1, "nodes": 1}
    assert changes.wait_until(lambda: hooks.relisted == everything)
    assert all(hooks.restarted[r] >= 1 for r in everything)
    assert catches_up_with_a_new_service(kube, informer, changes, real_api)


def test_a_service_relabelled_for_another_proxy_leaves_and_comes_back(
    kube: Kube, informer: PeekingInformer, changes: Changes, hooks: Hooks
) -> None:
    web = ObjectKey(kube.namespace, "web")
    labelled = example("Service", "web")
    labelled["metadata"]["labels"] = {PROXY_LABEL: "another-proxy"}
    kube.add(labelled)
    # The watch's label selector no longer matches: the server says DELETED.
    assert changes.wait_until(lambda: not has_service(informer, web))

    kube.add(example("Service", "web"))
    assert changes.wait_until(lambda: has_service(informer, web))
    # A slice the EndpointSlice controller marks headless leaves the same way.
    headless = example("EndpointSlice", "web-9fz4d")
    headless["metadata"]["labels"]["service.kubernetes.io/headless"] = ""
    kube.add(headless)
    slice_key = ObjectKey(kube.namespace, "web-9fz4d")
    assert changes.wait_until(lambda: slice_key not in informer.snapshot()[0].endpoint_slices)
    assert not hooks.relisted


def test_the_own_node_is_watched(kube: Kube, informer: PeekingInformer, changes: Changes) -> None:
    def zone() -> str | None:
        node = informer.snapshot()[0].node
        return node.zone if node is not None else "no node"

    assert zone() == "zone-1"
    node_a = example("Node", "node-a")
    node_a["metadata"]["labels"]["topology.kubernetes.io/zone"] = "zone-9"
    kube.add(node_a)
    assert changes.wait_until(lambda: zone() == "zone-9")

    kube.delete("Node", kube.node_name("node-a"))
    assert changes.wait_until(lambda: zone() == "no node")
    assert [r.object for r in informer.snapshot()[1]] == [f"Node {kube.node_name('node-a')}"]


def node_status(name: str, address: str, ready: str = "True") -> dict[str, Any]:
    return {
        "kind": "Node",
        "metadata": {"name": name},
        "status": {
            "addresses": [{"type": "InternalIP", "address": address}],
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


def test_every_nodes_addresses_are_watched_and_a_status_report_queues_nothing(
    kube: Kube, informer: PeekingInformer, changes: Changes, hooks: Hooks
) -> None:
    def by_address() -> dict[str, str]:
        found = informer.snapshot()[0].nodes_by_address
        return {str(address): name for address, name in found.items()}

    other = kube.node_name("node-c")
    kube.add({"kind": "Node", "metadata": {"name": "node-c", "labels": {"a": "b"}}})
    kube.apply_status(node_status(other, "192.168.10.13"))
    assert changes.wait_until(lambda: by_address().get("192.168.10.13") == other)
    # Of another node only its name and addresses are kept.
    kept = informer.nodes.items()[0][ObjectKey("", other)]
    assert (kept.labels, kept.taints, kept.pod_cidrs) == ({}, (), ())
    before, reported = informer.snapshot()[0].nodes_by_address, hooks.changed["nodes"]

    # A kubelet's status report that leaves the addresses as they were.
    stored = kube.apply_status(node_status(other, "192.168.10.13", ready="Unknown"))
    version = int(stored["metadata"]["resourceVersion"])
    assert changes.wait_until(lambda: int(informer.nodes.resource_version or 0) >= version)
    assert hooks.changed["nodes"] == reported
    assert informer.snapshot()[0].nodes_by_address is before

    kube.delete("Node", other)
    assert changes.wait_until(lambda: "192.168.10.13" not in by_address())
    assert hooks.changed["nodes"] == reported + 1


def test_stop_ends_every_thread(kube: Kube, real_api: ApiConnection) -> None:
    informer = PeekingInformer(real_api, kube.node_name(), backoff=FAST_BACKOFF)
    informer.start()
    assert informer.wait_for_sync(PATIENCE)

    informer.stop()

    assert not [t for t in threading.enumerate() if t.name.startswith("informer-")]


def test_a_malformed_object_is_rejected_until_it_is_fixed(
    kube: Kube, informer: PeekingInformer, changes: Changes
) -> None:
    def rejected() -> list[str]:
        return [r.object for r in informer.snapshot()[1]]

    web_slice = example("EndpointSlice", "web-9fz4d")
    # The API server takes a broadcast endpoint address; the proxy cannot use it.
    broken = {**web_slice, "endpoints": [{"addresses": ["255.255.255.255"]}]}
    kube.add(broken)
    label = f"EndpointSlice {kube.namespace}/web-9fz4d"
    assert changes.wait_until(lambda: rejected() == [label])
    # The endpoint alone is dropped; the slice and everything else stay.
    key = ObjectKey(kube.namespace, "web-9fz4d")
    assert informer.snapshot()[0].endpoint_slices[key].endpoints == ()

    kube.add(web_slice)
    assert changes.wait_until(
        lambda: rejected() == [] and len(informer.snapshot()[0].endpoint_slices[key].endpoints) == 3
    )


# -- faults only the fake API server produces ---------------------------------------------------


@pytest.fixture
def fake_informer(
    fake: FakeApiServer, api: ApiConnection, changes: Changes
) -> Iterator[PeekingInformer]:
    for obj in load_objects(EXAMPLE):
        fake.apply(obj)
    informer = PeekingInformer(
        api, "node-a", page_size=2, watch_timeout=5, backoff=FAST_BACKOFF, on_change=changes.notify
    )
    informer.start()
    assert informer.wait_for_sync(PATIENCE)
    yield informer
    informer.stop()


def requests_for(fake: FakeApiServer, *, watch: bool) -> int:
    """Service watches, or Service lists (a paginated list counts once)."""
    return sum(
        1
        for r in fake.requests
        if r.path == SERVICE.path
        and query_flag(r.query, "watch") == watch
        and "continue" not in r.query
    )


def in_fake(informer: PeekingInformer, name: str) -> bool:
    return has_service(informer, ObjectKey("default", name))


def test_a_dropped_stream_is_watched_again_from_where_it_was(
    fake: FakeApiServer, fake_informer: PeekingInformer, changes: Changes
) -> None:
    """Needs the fake: a real API server cannot be made to cut its open watch connections."""
    assert changes.wait_until(lambda: fake.open_watches == 3)
    watches = requests_for(fake, watch=True)
    fake.drop_connections()
    fake.apply(service("after-drop"))

    assert changes.wait_until(lambda: in_fake(fake_informer, "after-drop"))
    assert requests_for(fake, watch=True) > watches
    assert requests_for(fake, watch=False) == 1


def test_a_stalled_stream_is_abandoned_and_the_watch_resumes(
    fake: FakeApiServer, kubeconfig: Path, changes: Changes
) -> None:
    """Needs the fake: a real API server cannot be made to hold a watch open and silent."""
    fake.apply(service("before"))
    short = Timeouts(connect=1.0, read=0.5)
    with connect(kubeconfig, timeouts=short, retry=FAST_RETRY) as api:
        informer = PeekingInformer(
            api, "node-a", watch_timeout=1, backoff=FAST_BACKOFF, on_change=changes.notify
        )
        informer.start()
        try:
            assert informer.wait_for_sync(PATIENCE)
            fake.stall()
            fake.apply(service("during-stall"))
            watches = requests_for(fake, watch=True)
            # The silent stream outlives its timeout; the informer gives up on it and retries.
            assert changes.wait_until(lambda: requests_for(fake, watch=True) > watches + 1)
            assert not in_fake(informer, "during-stall")
            fake.resume()
            assert changes.wait_until(lambda: in_fake(informer, "during-stall"))
            assert requests_for(fake, watch=False) == 1
        finally:
            fake.resume()
            informer.stop()


def test_a_failing_rewatch_backs_off_and_recovers_without_relisting(
    fake: FakeApiServer, fake_informer: PeekingInformer, changes: Changes
) -> None:
    """Needs the fake: a real API server answers a watch with 500 only when broken."""
    assert changes.wait_until(lambda: fake.open_watches == 3)
    fake.fail_next(4, 500)
    fake.drop_connections()
    fake.apply(service("after-errors"))

    assert changes.wait_until(lambda: in_fake(fake_informer, "after-errors"))
    assert requests_for(fake, watch=False) == 1


def test_a_first_list_answered_with_500s_is_retried_until_it_succeeds(
    fake: FakeApiServer, api: ApiConnection
) -> None:
    """Needs the fake: a real API server answers a list with 500 only when broken."""
    for obj in load_objects(EXAMPLE):
        fake.apply(obj)
    # More failures than one request's own retries: the reflector's backoff must take over.
    fake.fail_next(12, 500)
    informer = PeekingInformer(api, "node-a", page_size=2, backoff=FAST_BACKOFF)
    informer.start()
    try:
        assert informer.wait_for_sync(PATIENCE)
        read = read_cluster(api, "node-a")
        assert informer.snapshot() == (read.snapshot, read.rejections)
    finally:
        informer.stop()
