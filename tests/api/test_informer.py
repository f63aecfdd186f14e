"""ClusterInformer against the fake API server: list, watch, bookmarks, 410, drops, stalls."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ipvsproxy.cluster.api import read_cluster
from ipvsproxy.cluster.connection import ApiConnection, Timeouts, connect
from ipvsproxy.cluster.informer import Backoff, ClusterInformer, InformerHooks
from ipvsproxy.cluster.source import load_objects
from ipvsproxy.model import ChangedKeys, ObjectKey
from tests.api.conftest import FAST_RETRY
from tests.api.fake_apiserver import SERVICE, FakeApiServer
from tests.api.test_read_cluster import EXAMPLE, service

# Waiting for the informer to catch up is bounded, and fails the test if it never does.
PATIENCE = 15.0
WEB = ObjectKey("shop", "web")


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
                # Also polls: some predicates read the fake's request log, which notifies no one.
                self._changed.wait(min(remaining, 0.1))
        return True


@pytest.fixture
def changes() -> Changes:
    return Changes()


@pytest.fixture
def informer(
    fake: FakeApiServer, api: ApiConnection, changes: Changes
) -> Iterator[ClusterInformer]:
    for obj in load_objects(EXAMPLE):
        fake.apply(obj)
    informer = ClusterInformer(
        api,
        "node-a",
        page_size=2,
        watch_timeout=5,
        backoff=Backoff(initial=0.05, maximum=0.2),
        on_change=changes.notify,
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
        and (r.query.get("watch") == "true") == watch
        and "continue" not in r.query
    )


def has_service(informer: ClusterInformer, name: str, namespace: str = "default") -> bool:
    return ObjectKey(namespace, name) in informer.snapshot()[0].services


def web_port(informer: ClusterInformer) -> int | None:
    """The web service's only port, None when it has none (or the service is gone)."""
    web = informer.snapshot()[0].services.get(WEB)
    return web.ports[0].port if web is not None and web.ports else None


def with_port(obj: dict[str, Any], port: int) -> dict[str, Any]:
    spec = {**obj["spec"], "ports": [{**obj["spec"]["ports"][0], "port": port}]}
    return {**obj, "spec": spec}


def web() -> dict[str, Any]:
    return next(
        o
        for o in load_objects(EXAMPLE)
        if o["kind"] == "Service" and o["metadata"]["name"] == "web"
    )


def test_the_informer_starts_from_the_same_view_as_one_read(
    informer: ClusterInformer, api: ApiConnection
) -> None:
    read = read_cluster(api, "node-a")
    assert informer.snapshot() == (read.snapshot, read.rejections)
    assert informer.services.resource_version == read.services_version


def test_added_modified_and_deleted_objects_are_applied(
    fake: FakeApiServer, informer: ClusterInformer, changes: Changes, api: ApiConnection
) -> None:
    fake.apply(service("new"))
    fake.apply(with_port(web(), 8080))
    fake.delete("Service", "data", "db")
    fake.delete("EndpointSlice", "data", "db-h5v1n")

    assert changes.wait_until(
        lambda: (
            has_service(informer, "new")
            and web_port(informer) == 8080
            and not has_service(informer, "db", "data")
        )
    )
    assert requests_for(fake, watch=False) == 1
    read = read_cluster(api, "node-a")
    assert changes.wait_until(lambda: informer.snapshot() == (read.snapshot, read.rejections))


def test_a_taken_snapshot_names_the_objects_the_watch_touched_since_the_last(
    fake: FakeApiServer, informer: ClusterInformer, changes: Changes
) -> None:
    # Right after the list, anything may have changed.
    first, _, changed = informer.take_snapshot()
    assert changed is None and WEB in first.services
    fake.apply(with_port(web(), 8080))
    fake.delete("EndpointSlice", "data", "db-h5v1n")
    assert changes.wait_until(lambda: web_port(informer) == 8080)
    assert changes.wait_until(
        lambda: ObjectKey("data", "db-h5v1n") not in informer.snapshot()[0].endpoint_slices
    )
    # ``snapshot`` leaves the touched keys for ``take_snapshot``, which takes them once.
    snapshot, _, changed = informer.take_snapshot()
    assert changed == ChangedKeys(frozenset({WEB}), frozenset({ObjectKey("data", "db-h5v1n")}))
    assert snapshot.services[WEB].ports[0].port == 8080
    assert informer.take_snapshot()[2] == ChangedKeys(frozenset(), frozenset())


def test_a_bookmark_moves_the_version_so_a_rewatch_needs_no_relist(
    fake: FakeApiServer, informer: ClusterInformer, changes: Changes
) -> None:
    # Bookmarks go to open watches only.
    assert changes.wait_until(lambda: fake.open_watches == 3)
    # A change the services watch does not see moves the cluster's version past it.
    fake.apply({"kind": "Node", "metadata": {"name": "node-c"}})
    assert informer.services.resource_version != str(fake.resource_version)
    fake.bookmark()
    assert changes.wait_until(
        lambda: informer.services.resource_version == str(fake.resource_version)
    )

    # History older than the bookmark is gone; the re-watch starts from the bookmark.
    fake.compact()
    fake.drop_connections()
    fake.apply(service("after-drop"))

    assert changes.wait_until(lambda: has_service(informer, "after-drop"))
    assert requests_for(fake, watch=False) == 1


def test_a_dropped_stream_is_watched_again_from_where_it_was(
    fake: FakeApiServer, informer: ClusterInformer, changes: Changes
) -> None:
    assert changes.wait_until(lambda: fake.open_watches == 3)
    watches = requests_for(fake, watch=True)
    fake.drop_connections()
    fake.apply(service("after-drop"))

    assert changes.wait_until(lambda: has_service(informer, "after-drop"))
    assert requests_for(fake, watch=True) > watches
    assert requests_for(fake, watch=False) == 1


def test_a_restart_that_keeps_the_history_needs_no_relist(
    fake: FakeApiServer, informer: ClusterInformer, changes: Changes
) -> None:
    assert changes.wait_until(lambda: fake.open_watches == 3)
    fake.restart()
    fake.apply(service("after-restart"))

    assert changes.wait_until(lambda: has_service(informer, "after-restart"))
    assert requests_for(fake, watch=False) == 1


def test_410_after_a_restart_relists_and_catches_up(
    fake: FakeApiServer, informer: ClusterInformer, changes: Changes
) -> None:
    informer.take_snapshot()
    fake.stop()
    # While the server is down the cluster moves on, and its watch history is compacted.
    fake.delete("Service", "data", "db")
    fake.apply(service("while-down"))
    fake.compact()
    fake.start()

    assert changes.wait_until(
        lambda: has_service(informer, "while-down") and not has_service(informer, "db", "data")
    )
    assert requests_for(fake, watch=False) == 2
    assert informer.services.resource_version == str(fake.resource_version)
    # After the relist, the watch's touched keys cannot tell what changed.
    assert informer.take_snapshot()[2] is None


def test_a_stalled_stream_is_abandoned_and_the_watch_resumes(
    fake: FakeApiServer, kubeconfig: Path, changes: Changes
) -> None:
    fake.apply(service("before"))
    short = Timeouts(connect=1.0, read=0.5)
    with connect(kubeconfig, timeouts=short, retry=FAST_RETRY) as api:
        informer = ClusterInformer(
            api, "node-a", watch_timeout=1, backoff=Backoff(0.05, 0.2), on_change=changes.notify
        )
        informer.start()
        try:
            assert informer.wait_for_sync(PATIENCE)
            fake.stall()
            fake.apply(service("during-stall"))
            watches = requests_for(fake, watch=True)
            # The silent stream outlives its timeout; the informer gives up on it and retries.
            assert changes.wait_until(lambda: requests_for(fake, watch=True) > watches + 1)
            assert not has_service(informer, "during-stall")
            fake.resume()
            assert changes.wait_until(lambda: has_service(informer, "during-stall"))
            assert requests_for(fake, watch=False) == 1
        finally:
            fake.resume()
            informer.stop()


def test_the_own_node_is_watched(
    fake: FakeApiServer, informer: ClusterInformer, changes: Changes
) -> None:
    def zone() -> str | None:
        node = informer.snapshot()[0].node
        return node.zone if node is not None else "no node"

    assert zone() == "zone-1"
    fake.apply(
        {
            "kind": "Node",
            "metadata": {"name": "node-a", "labels": {"topology.kubernetes.io/zone": "zone-9"}},
        }
    )
    assert changes.wait_until(lambda: zone() == "zone-9")

    fake.delete("Node", "", "node-a")
    assert changes.wait_until(lambda: zone() == "no node")
    assert [r.object for r in informer.snapshot()[1]] == ["Node node-a"]


def node(name: str, *addresses: str, ready: str = "True") -> dict[str, Any]:
    return {
        "kind": "Node",
        "metadata": {"name": name},
        "status": {
            "addresses": [{"type": "InternalIP", "address": a} for a in addresses],
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


def test_every_nodes_addresses_are_watched_and_a_heartbeat_queues_nothing(
    fake: FakeApiServer, api: ApiConnection, changes: Changes
) -> None:
    for obj in load_objects(EXAMPLE):
        fake.apply(obj)
    changed = _Counter()
    informer = ClusterInformer(
        api,
        "node-a",
        backoff=Backoff(0.05, 0.2),
        on_change=changes.notify,
        hooks=InformerHooks(changed=changed.update_one),
    )
    informer.start()
    try:
        assert informer.wait_for_sync(PATIENCE)

        def by_address() -> dict[str, str]:
            found = informer.snapshot()[0].nodes_by_address
            return {str(address): name for address, name in found.items()}

        assert by_address() == {"192.168.10.11": "node-a", "192.168.10.12": "node-b"}
        fake.apply(node("node-c", "192.168.10.13"))
        assert changes.wait_until(lambda: by_address().get("192.168.10.13") == "node-c")
        before, reported = informer.snapshot()[0].nodes_by_address, changed["nodes"]

        # A kubelet's status update that leaves the addresses as they were.
        fake.apply(node("node-c", "192.168.10.13", ready="Unknown"))
        assert changes.wait_until(
            lambda: informer.nodes.resource_version == str(fake.resource_version)
        )
        assert changed["nodes"] == reported
        assert informer.snapshot()[0].nodes_by_address is before

        fake.delete("Node", "", "node-c")
        assert changes.wait_until(lambda: "192.168.10.13" not in by_address())
        assert changed["nodes"] == reported + 1
    finally:
        informer.stop()


def test_stop_ends_every_thread(fake: FakeApiServer, api: ApiConnection) -> None:
    informer = ClusterInformer(api, "node-a", backoff=Backoff(0.05, 0.2))
    informer.start()
    assert informer.wait_for_sync(PATIENCE)

    informer.stop()

    assert not [t for t in threading.enumerate() if t.name.startswith("informer-")]


def test_a_failing_rewatch_backs_off_and_recovers_without_relisting(
    fake: FakeApiServer, informer: ClusterInformer, changes: Changes
) -> None:
    assert changes.wait_until(lambda: fake.open_watches == 3)
    fake.fail_next(4, 500)
    fake.drop_connections()
    fake.apply(service("after-errors"))

    assert changes.wait_until(lambda: has_service(informer, "after-errors"))
    assert requests_for(fake, watch=False) == 1


def test_a_malformed_object_is_rejected_until_it_is_fixed(
    fake: FakeApiServer, informer: ClusterInformer, changes: Changes
) -> None:
    def rejected() -> list[str]:
        return [r.object for r in informer.snapshot()[1]]

    broken = with_port(web(), 70000)
    fake.apply(broken)
    assert changes.wait_until(lambda: rejected() == ["Service shop/web"])
    # The port alone is dropped; the service and everything else stay.
    assert web_port(informer) is None
    assert has_service(informer, "web", "shop")
    assert len(informer.snapshot()[0].services) == 5

    fake.apply(with_port(web(), 81))
    assert changes.wait_until(lambda: rejected() == [] and web_port(informer) == 81)


class _Counter(Counter[str]):
    def update_one(self, key: str) -> None:
        self[key] += 1


def test_hooks_see_changes_relists_and_watch_restarts_by_resource(
    fake: FakeApiServer, api: ApiConnection, changes: Changes
) -> None:
    for obj in load_objects(EXAMPLE):
        fake.apply(obj)
    changed, relisted, restarted = _Counter(), _Counter(), _Counter()
    hooks = InformerHooks(
        changed=changed.update_one,
        relisted=relisted.update_one,
        watch_restarted=restarted.update_one,
    )
    informer = ClusterInformer(
        api, "node-a", backoff=Backoff(0.05, 0.2), on_change=changes.notify, hooks=hooks
    )
    informer.start()
    try:
        assert informer.wait_for_sync(PATIENCE)
        # The first list of each resource is a change, not a relist.
        assert changed == {"services": 1, "endpointslices": 1, "nodes": 1}
        assert not relisted and not restarted
        assert changes.wait_until(lambda: fake.open_watches == 3)
        fake.apply(service("one-more"))
        assert changes.wait_until(lambda: changed["services"] == 2)

        fake.stop()
        fake.apply(service("while-down"))
        fake.compact()
        fake.start()
        assert changes.wait_until(
            lambda: relisted == {"services": 1, "endpointslices": 1, "nodes": 1}
        )
        assert all(restarted[resource] >= 1 for resource in ("services", "endpointslices", "nodes"))
    finally:
        informer.stop()


def test_a_first_list_answered_with_500s_is_retried_until_it_succeeds(
    fake: FakeApiServer, api: ApiConnection
) -> None:
    for obj in load_objects(EXAMPLE):
        fake.apply(obj)
    # More failures than one request's own retries: the reflector's backoff must take over.
    fake.fail_next(12, 500)
    informer = ClusterInformer(api, "node-a", page_size=2, backoff=Backoff(0.05, 0.2))
    informer.start()
    try:
        assert informer.wait_for_sync(PATIENCE)
        read = read_cluster(api, "node-a")
        assert informer.snapshot() == (read.snapshot, read.rejections)
    finally:
        informer.stop()
