"""The informer against an API server that sends what a real one never would.

Every test here runs against the fake API server (real HTTP on loopback, the real
``kubernetes`` client), and each says in its first line why a real kube-apiserver cannot stand
in for it: one cannot be made to send garbage.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ipvsproxy.cluster.connection import ApiConnection, RetryPolicy, Timeouts, connect
from ipvsproxy.cluster.informer import Backoff, ClusterInformer
from tests.api.fake_apiserver import NODE, FakeApiServer, Request

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
    informer = ClusterInformer(api, NODE_NAME, backoff=BACKOFF)
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
