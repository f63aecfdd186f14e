"""The informer against an API server that sends what a real one never would.

Every test here runs against the fake API server (real HTTP on loopback, the real
``kubernetes`` client), and each says in its first line why a real kube-apiserver cannot stand
in for it: one cannot be made to send garbage.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ipvsproxy.cluster.api import MAX_EVENT_BYTES
from ipvsproxy.cluster.connection import ApiConnection, RetryPolicy, Timeouts, connect
from ipvsproxy.cluster.informer import Backoff, InformerHooks
from ipvsproxy.daemon.daemon import Daemon, DaemonOptions
from ipvsproxy.kernel.testing import FakeKernel
from ipvsproxy.model import ObjectKey
from ipvsproxy.translate import Settings
from tests.api.fake_apiserver import NODE, SERVICE, FakeApiServer, Request
from tests.api.informer_kit import PeekingInformer

PATIENCE = 15.0
NODE_NAME = "node-a"
# The backoff without jitter, so that its floor is known: 0.2, 0.4, 0.8, then 1 s.
BACKOFF = Backoff(initial=0.2, maximum=1.0, jitter=0.0)
FLOORS = [0.2, 0.4, 0.8, 1.0]


def service(name: str, **annotations: str) -> dict[str, Any]:
    return {
        "kind": "Service",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": {"clusterIP": "10.96.1.1", "ports": [{"name": "http", "port": 80}]},
    }


def node() -> dict[str, Any]:
    return {"kind": "Node", "metadata": {"name": NODE_NAME}}


def eventually(predicate: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + PATIENCE
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[FakeApiServer, ApiConnection]]:
    with FakeApiServer() as fake:
        fake.apply(node())
        fake.apply(service("before"))
        kubeconfig = fake.write_kubeconfig(tmp_path / "kubeconfig")
        retry = RetryPolicy(attempts=3, first_delay=0.0, max_delay=0.0)
        with connect(kubeconfig, timeouts=Timeouts(connect=2.0, read=2.0), retry=retry) as api:
            yield fake, api


class Informer:
    """A started ClusterInformer, with what its hooks reported."""

    def __init__(self, api: ApiConnection) -> None:
        self.malformed: Counter[str] = Counter()
        self.informer = PeekingInformer(
            api,
            NODE_NAME,
            # Long watches: a test sees one stream go on, not the server's timeout.
            watch_timeout=60,
            backoff=BACKOFF,
            hooks=InformerHooks(malformed_event=self.count_malformed),
        )

    def count_malformed(self, resource: str) -> None:
        self.malformed[resource] += 1

    def has_service(self, name: str) -> bool:
        return ObjectKey("default", name) in self.informer.snapshot()[0].services


@pytest.fixture
def informer(server: tuple[FakeApiServer, ApiConnection]) -> Iterator[Informer]:
    started = Informer(server[1])
    started.informer.start()
    assert started.informer.wait_for_sync(PATIENCE)
    yield started
    started.informer.stop()


def service_watches(fake: FakeApiServer) -> int:
    return sum(1 for r in fake.requests if r.path == SERVICE.path and r.query.get("watch"))


def warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_relists_after_410_back_off_like_any_failure(
    server: tuple[FakeApiServer, ApiConnection],
) -> None:
    """Needs the fake: kube-apiserver answers 410 only to versions compacted away, not to all."""
    fake, api = server
    fake.answer_watches_with_gone()
    node_lists: list[float] = []
    lock = threading.Lock()

    def record(request: Request) -> None:
        if request.path == NODE.path and not request.query.get("watch"):
            with lock:
                node_lists.append(time.monotonic())

    fake.on_request = record
    informer = Informer(api).informer
    informer.start()
    try:
        assert informer.wait_for_sync(PATIENCE)
        # The first list, then a relist after each 410: wait for four relists.
        assert eventually(lambda: len(node_lists) >= 5)
        with lock:
            seen = list(node_lists)
    finally:
        informer.stop()
    gaps = [later - earlier for earlier, later in itertools.pairwise(seen)]
    assert all(gap >= floor for gap, floor in zip(gaps, FLOORS, strict=False)), gaps
    # In the first two seconds: at most 4 lists (0.2 + 0.4 + 0.8 s of waiting); without the
    # backoff, hundreds.
    assert sum(1 for at in seen if at - seen[0] < 2.0) <= 4


def test_the_first_relist_after_failures_waits_the_first_delay_not_theirs(
    server: tuple[FakeApiServer, ApiConnection],
    informer: Informer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Needs the fake: a real server cannot be told to fail nine requests, then 410 every watch."""
    fake, _ = server
    caplog.set_level(logging.INFO, logger="ipvsproxy.cluster.informer")
    assert eventually(lambda: fake.open_watches == 3)
    fake.answer_watches_with_gone()
    # Nine failed re-watches among three reflectors: one of them failed three times or more.
    fake.fail_next(9, 503)
    fake.drop_connections()
    resources = ("Services", "EndpointSlices", "Nodes")

    def first_relists() -> dict[str, str]:
        found: dict[str, str] = {}
        for message in caplog.messages:
            for resource in resources:
                if f"listing {resource} again in" in message:
                    found.setdefault(resource, message.rsplit(" in ", 1)[1])
        return found

    assert eventually(lambda: len(first_relists()) == 3)
    assert any(message.endswith("retrying in 0.8 s") for message in caplog.messages)
    assert first_relists() == dict.fromkeys(resources, "0.2 s")


NESTED_5000_DEEP = b'{"type": "ADDED", "object": ' + b"[" * 5000 + b"]" * 5000 + b"}"
BOOKMARK_METADATA_LIST = b'{"type": "BOOKMARK", "object": {"kind": "Service", "metadata": [1]}}'


@pytest.mark.parametrize(
    ("line", "warning"),
    [
        (NESTED_5000_DEEP, "an event nested too deep to decode"),
        (BOOKMARK_METADATA_LIST, "a BOOKMARK event whose metadata is not an object"),
    ],
    ids=["nested-5000-deep", "bookmark-metadata-list"],
)
def test_a_line_that_is_no_event_is_one_log_line_and_the_watch_goes_on(
    server: tuple[FakeApiServer, ApiConnection],
    informer: Informer,
    caplog: pytest.LogCaptureFixture,
    line: bytes,
    warning: str,
) -> None:
    """Needs the fake: kube-apiserver sends only events it encoded itself, never such lines."""
    fake, _ = server
    assert eventually(lambda: fake.open_watches == 3)
    watches = service_watches(fake)
    fake.send_raw("Service", line)
    fake.apply(service("after"))

    assert eventually(lambda: informer.has_service("after"))
    assert [r.getMessage() for r in warnings(caplog)] == [
        f"watching Services: the API server sent {warning}; skipped it"
    ]
    assert not any(r.exc_info for r in caplog.records)
    assert informer.malformed == Counter({"services": 1})
    # The same stream went on, and the version it resumes from is the server's own.
    assert service_watches(fake) == watches
    assert informer.informer.services.resource_version == str(fake.resource_version)


def test_an_object_sent_in_4_kib_chunks_arrives_whole(
    server: tuple[FakeApiServer, ApiConnection], informer: Informer
) -> None:
    """Needs the fake: kube-apiserver writes an event at once, and etcd refuses a 12 MiB object."""
    fake, _ = server
    fake.chunk_watch_events(4096)
    big = "x" * (12 << 20)
    fake.apply(service("big", note=big, **{"ipvsproxy.io/scheduler": "wrr"}))

    # Joining 3,072 chunks one onto the other copied 19 GB: it took longer than the patience.
    assert eventually(lambda: informer.has_service("big"))
    arrived = informer.informer.snapshot()[0].services[ObjectKey("default", "big")]
    assert arrived.annotations == {"ipvsproxy.io/scheduler": "wrr"}


def test_an_event_over_16_mib_is_one_line_and_the_watch_goes_on(
    server: tuple[FakeApiServer, ApiConnection],
    informer: Informer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Needs the fake: etcd refuses objects past 1.5 MiB, so kube-apiserver never sends one."""
    fake, _ = server
    assert eventually(lambda: fake.open_watches == 3)
    fake.chunk_watch_events(1 << 20)
    fake.apply(service("huge", note="x" * MAX_EVENT_BYTES))
    fake.apply(service("after"))

    assert eventually(lambda: informer.has_service("after"))
    assert not informer.has_service("huge")
    [warning] = [r.getMessage() for r in warnings(caplog)]
    assert warning.startswith("watching Services: the API server sent an event of ")
    assert warning.endswith(f"bytes or more, over the bound of {MAX_EVENT_BYTES}; skipped it")
    assert informer.malformed == Counter({"services": 1})


def test_the_daemon_counts_malformed_events_by_resource(
    server: tuple[FakeApiServer, ApiConnection],
) -> None:
    """Needs the fake: kube-apiserver never sends a watch line that is not JSON."""
    fake, api = server
    daemon = Daemon(FakeKernel().kernel(), Settings(), DaemonOptions(healthz=None, metrics=None))
    informer = PeekingInformer(
        api, NODE_NAME, watch_timeout=60, backoff=BACKOFF, hooks=daemon.informer_hooks()
    )
    informer.start()
    try:
        assert informer.wait_for_sync(PATIENCE)
        assert eventually(lambda: fake.open_watches == 3)
        fake.send_raw("EndpointSlice", b"not json")
        assert eventually(
            lambda: (
                daemon.metrics.registry.get_sample_value(
                    "ipvsproxy_watch_malformed_events_total", {"resource": "endpointslices"}
                )
                == 1
            )
        )
    finally:
        informer.stop()
