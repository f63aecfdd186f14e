"""The daemon's small parts: runner, health, change tracking, logs, bind addresses."""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from dataclasses import replace

import pytest

from ipvsproxy.cluster.informer import Backoff
from ipvsproxy.cluster.parse import snapshot_from_objects
from ipvsproxy.config import parse_bind_address
from ipvsproxy.daemon.changes import EMPTY_SNAPSHOT, diff
from ipvsproxy.daemon.health import ProxierHealth, node_eligible
from ipvsproxy.daemon.logs import JsonFormatter, TextFormatter, configure
from ipvsproxy.daemon.nodeports import health_check_hosts
from ipvsproxy.daemon.runner import BoundedFrequencyRunner, SyncBudget
from ipvsproxy.model import ChangedKeys, ClusterSnapshot, Node, ObjectKey
from ipvsproxy.translate import Settings, translate
from ipvsproxy.translate.settings import parse_nodeport_addresses
from tests.daemon_kit import NODE, cluster, endpoint_slice, service


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def snapshot(objects: list[dict[str, object]]) -> ClusterSnapshot:
    return snapshot_from_objects(objects, NODE)[0]


# -- runner ----------------------------------------------------------------------------------


def test_requests_during_a_run_coalesce_into_one_more_run() -> None:
    started = threading.Event()
    release = threading.Event()
    runs: list[float] = []

    def work() -> None:
        runs.append(time.monotonic())
        started.set()
        release.wait(10)

    runner = BoundedFrequencyRunner(work, min_interval=0.0, max_interval=3600)
    thread = threading.Thread(target=runner.loop)
    thread.start()
    try:
        runner.request()
        assert started.wait(10)
        for _ in range(50):
            runner.request()
        release.set()
        deadline = time.monotonic() + 10
        while len(runs) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
    finally:
        runner.stop()
        release.set()
        thread.join(10)
    assert len(runs) == 2
    assert not thread.is_alive()


def test_runs_keep_to_one_per_minimum_interval_after_a_burst_of_two() -> None:
    runs: list[float] = []
    runner = BoundedFrequencyRunner(lambda: runs.append(time.monotonic()), 0.3, 3600)
    thread = threading.Thread(target=runner.loop)
    thread.start()
    try:
        for _ in range(5):
            runner.request()
            deadline = time.monotonic() + 10
            count = len(runs)
            while len(runs) == count and time.monotonic() < deadline:
                runner.request()
                time.sleep(0.01)
    finally:
        runner.stop()
        thread.join(10)
    assert len(runs) >= 5
    # Two at once, then a run per interval: any three runs span at least one interval.
    assert runs[1] - runs[0] < 0.3
    assert all(third - first >= 0.29 for first, third in zip(runs, runs[2:], strict=False))


def test_the_sync_budget_allows_two_at_once_then_one_per_interval_and_refills() -> None:
    budget = SyncBudget(min_interval=1.0, burst=2, now=0.0)
    assert budget.wait(0.0) == 0.0
    budget.spend(0.0)
    assert budget.wait(0.0) == 0.0
    budget.spend(0.0)
    assert budget.wait(0.0) == 1.0
    assert budget.wait(0.25) == 0.75
    budget.spend(1.0)
    assert budget.wait(1.0) == 1.0
    # Quiet for long: the bucket holds no more than the burst.
    assert budget.wait(60.0) == 0.0
    budget.spend(60.0)
    budget.spend(60.0)
    assert budget.wait(60.0) == 1.0
    unlimited = SyncBudget(min_interval=0.0, burst=2, now=0.0)
    for _ in range(5):
        unlimited.spend(0.0)
    assert unlimited.wait(0.0) == 0.0


def test_a_run_takes_a_due_request_into_itself_within_the_budget() -> None:
    now = [0.0]
    runner = BoundedFrequencyRunner(lambda: None, 1.0, 3600, clock=lambda: now[0])
    # Nothing asked: nothing due.
    assert not runner.take_due()
    runner.request()
    assert runner.take_due()
    # The request was taken with it.
    assert not runner.take_due()
    # The burst of two is spent: the next waits for the budget to refill.
    runner.request()
    assert runner.take_due()
    runner.request()
    assert not runner.take_due()
    now[0] = 0.5
    assert not runner.take_due()
    now[0] = 1.0
    assert runner.take_due()
    runner.request()
    runner.stop()
    now[0] = 10.0
    assert not runner.take_due()


def test_the_runner_runs_unasked_after_the_maximum_interval_but_not_before_a_first_request() -> (
    None
):
    runs: list[float] = []
    runner = BoundedFrequencyRunner(lambda: runs.append(time.monotonic()), 0.0, 0.2)
    thread = threading.Thread(target=runner.loop)
    thread.start()
    try:
        time.sleep(0.5)
        assert runs == []
        runner.request()
        deadline = time.monotonic() + 10
        while len(runs) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        runner.stop()
        thread.join(10)
    assert len(runs) >= 3


# -- health ----------------------------------------------------------------------------------


def test_health_turns_bad_only_when_a_queued_update_waits_too_long() -> None:
    clock = Clock()
    health = ProxierHealth(timeout=60.0, clock=clock)
    health.queued_update()
    clock.now += 600
    # Healthy while starting up, however long the first sync takes, as kube-proxy.
    assert health.healthz().status == 200
    health.sync_began()
    health.updated()
    health.queued_update()
    clock.now += 59
    # A later queue does not reset the oldest one.
    health.queued_update()
    assert health.livez().status == 200
    clock.now += 2
    assert health.livez().status == 503 and health.healthz().status == 503
    # Unhealthy, the body says when the last sync was.
    assert json.loads(health.livez().body) == {
        "lastUpdated": "1970-01-01 00:26:40.000000000 +0000 UTC",
        "currentTime": "1970-01-01 00:27:41.000000000 +0000 UTC",
    }
    health.sync_began()
    health.updated()
    assert health.livez().status == 200
    # Healthy, lastUpdated is now, as kube-proxy keeps it for older clients.
    body = json.loads(health.healthz().body)
    assert body["lastUpdated"] == body["currentTime"] == "1970-01-01 00:27:41.000000000 +0000 UTC"


def test_an_update_queued_during_a_sync_still_waits_once_that_sync_is_done() -> None:
    """The sync read the cluster before the change came: its end does not clear it, so if the
    syncs after it fail, the proxy turns unhealthy rather than staying 200 for ever."""
    clock = Clock()
    health = ProxierHealth(timeout=60.0, clock=clock)
    health.sync_began()
    health.updated()
    health.sync_began()
    clock.now += 1
    health.queued_update()
    health.updated()
    clock.now += 60
    assert health.livez().status == 503
    # A sync that began after it programs it.
    health.sync_began()
    health.updated()
    assert health.livez().status == 200


def test_a_full_sync_ending_after_a_sync_it_made_leaves_what_waits_waiting() -> None:
    clock = Clock()
    health = ProxierHealth(timeout=60.0, clock=clock)
    health.sync_began()
    health.updated()
    # A full sync begins; a change comes; the full sync makes a sync of it while it reads.
    health.sync_began()
    health.queued_update()
    health.sync_began()
    health.updated()
    # Another comes, then the full sync ends: it read the cluster before that one.
    clock.now += 1
    health.queued_update()
    health.updated()
    clock.now += 60
    assert health.livez().status == 503
    health.sync_began()
    health.updated()
    assert health.livez().status == 200


@pytest.mark.parametrize(
    ("node", "eligible"),
    [
        (None, True),
        (Node("n"), True),
        (Node("n", taints=("node.kubernetes.io/unschedulable",)), True),
        (Node("n", taints=("ToBeDeletedByClusterAutoscaler",)), False),
        (Node("n", deleting=True), False),
    ],
)
def test_node_eligibility(node: Node | None, eligible: bool) -> None:
    assert node_eligible(node) is eligible
    health = ProxierHealth(timeout=60.0)
    health.set_node(node)
    assert (health.healthz().status == 200) is eligible
    assert health.livez().status == 200


# -- change tracking ---------------------------------------------------------------------------


def test_changes_name_the_services_of_changed_services_and_slices() -> None:
    objects = cluster(5)
    before = snapshot(objects)
    assert diff(before, snapshot(objects)).any is False
    assert diff(EMPTY_SNAPSHOT, before).services == {
        ObjectKey("default", f"svc-{i}") for i in range(5)
    }
    changed = [o for o in objects if o["metadata"]["name"] != "svc-4"]
    changed += [service(9)]
    changed = [o for o in changed if o["metadata"]["name"] != "svc-1-abcde"]
    changed += [endpoint_slice(1, endpoints=1)]
    found = diff(before, snapshot(changed))
    assert found.services == {ObjectKey("default", n) for n in ("svc-1", "svc-4", "svc-9")}
    assert (found.service_objects, found.endpoint_slice_objects, found.node) == (2, 1, False)
    assert before.node is not None
    moved = replace(before, node=replace(before.node, addresses=("10.0.0.1",)))
    assert diff(before, moved).node and diff(before, moved).any
    # Told which objects the watch touched, only those are compared: a touched object that
    # came back the same is no change, and a slice names its service.
    touched = ChangedKeys(
        frozenset({ObjectKey("default", "svc-4"), ObjectKey("default", "svc-2")}),
        frozenset({ObjectKey("default", "svc-1-abcde")}),
    )
    found = diff(before, snapshot(changed), touched)
    assert found.services == {ObjectKey("default", n) for n in ("svc-1", "svc-4")}
    assert found.endpoint_slices == {ObjectKey("default", "svc-1-abcde")}


# -- logs, labels, addresses -------------------------------------------------------------------


def _record(**extra: object) -> logging.LogRecord:
    record = logging.makeLogRecord({"msg": "synced %s", "args": ("now",), "levelname": "INFO"})
    record.__dict__.update(extra)
    return record


def test_json_logs_are_one_object_per_line_with_the_events_fields() -> None:
    line = JsonFormatter().format(_record(mode="full", writes=3))
    entry = json.loads(line)
    assert "\n" not in line
    assert entry["msg"] == "synced now" and entry["level"] == "info"
    assert (entry["mode"], entry["writes"]) == ("full", 3) and entry["ts"].endswith("Z")


def test_text_logs_put_the_fields_after_the_message() -> None:
    line = TextFormatter().format(_record(mode="full"))
    assert line.endswith(' info synced now mode="full"')


@pytest.mark.parametrize("verbosity", [0, 4])
def test_verbosity_four_shows_our_debug_lines_and_never_the_libraries(
    verbosity: int, capsys: pytest.CaptureFixture[str]
) -> None:
    root, own = logging.getLogger(), logging.getLogger("ipvsproxy")
    saved = (root.handlers[:], root.level, own.level)
    try:
        configure("text", verbosity)
        logging.getLogger("ipvsproxy.daemon.daemon").debug("syncing")
        logging.getLogger("pyroute2.netlink").debug("every message decoded")
        logging.getLogger("kubernetes.client").info("a library's info")
    finally:
        root.handlers[:], _, _ = saved
        root.setLevel(saved[1])
        own.setLevel(saved[2])
    logged = capsys.readouterr().err
    assert ("debug syncing" in logged) is (verbosity == 4)
    assert "every message decoded" not in logged
    assert "a library's info" in logged


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.0.0.0:10256", ("0.0.0.0", 10256)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("[::1]:10249", ("::1", 10249)),
        (":10249", ("0.0.0.0", 10249)),
    ],
)
def test_bind_addresses(text: str, expected: tuple[str, int]) -> None:
    assert parse_bind_address(text) == expected


@pytest.mark.parametrize("text", ["10256", "localhost:1", "1.2.3.4:99999", "1.2.3.4:x"])
def test_bad_bind_addresses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_bind_address(text)


def test_watch_backoff_doubles_to_its_cap_with_jitter_on_top() -> None:
    delays = list(itertools.islice(Backoff(0.8, 30.0).delays(), 10))
    floors = [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0, 30.0, 30.0]
    assert all(floor <= delay <= 2 * floor for delay, floor in zip(delays, floors, strict=True))
    assert list(itertools.islice(Backoff(0.8, 30.0, jitter=0).delays(), 3)) == [0.8, 1.6, 3.2]


# -- health-check node ports ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("nodeport_addresses", "expected"),
    [
        ([], None),
        # A family the flag names no CIDR of keeps all its addresses, as kube-proxy's.
        (["192.168.10.0/24"], ["192.168.10.11", "fd00::11"]),
        (["192.168.10.0/24", "fd00:1::/64"], ["192.168.10.11"]),
        (["192.168.10.0/24", "0.0.0.0/0"], None),
        (["primary"], ["192.168.10.11", "fd00::11"]),
        (["10.0.0.0/8", "fd00:1::/64"], []),
    ],
)
def test_health_check_node_ports_listen_where_nodeport_addresses_says(
    nodeport_addresses: list[str], expected: list[str] | None
) -> None:
    objects = cluster(1)
    objects[0]["status"]["addresses"].append({"type": "InternalIP", "address": "fd00::11"})
    networks, primary = parse_nodeport_addresses(nodeport_addresses)
    settings = Settings(nodeport_addresses=networks, nodeport_primary=primary)
    desired = translate(snapshot(objects), settings)
    assert health_check_hosts(settings, desired) == expected
