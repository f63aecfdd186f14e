"""The daemon's threads are supervised: a sync loop that hits an exception is restarted and the
sync it was doing happens; one that cannot run turns /livez and /healthz 503 (over HTTP) until
it runs again, and the metrics say which worker."""

from __future__ import annotations

import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ipvsproxy.cluster.parse import snapshot_from_objects
from ipvsproxy.daemon.daemon import Daemon, DaemonOptions
from ipvsproxy.daemon.sources import Reading
from ipvsproxy.kernel.testing import FakeKernel
from ipvsproxy.supervise import RestartPolicy
from ipvsproxy.translate import Settings
from tests.daemon_kit import NODE, cluster, endpoint_slice, service

PATIENCE = 20.0
QUICK = RestartPolicy(initial_delay=0.01, max_delay=0.05, failing_after=3, stable_after=1.0)


def eventually(predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + PATIENCE
    while not predicate():
        assert time.monotonic() < deadline, "gave up waiting"
        time.sleep(0.02)


class BreakableSource:
    """The cluster in ``objects``; ``snapshot`` raises while ``failures_left`` is not 0
    (negative: for good)."""

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.objects = objects
        self.failures_left = 0

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def wait_for_sync(self, timeout: float) -> bool:
        return True

    def snapshot(self) -> Reading:
        if self.failures_left:
            self.failures_left -= 1
            raise RuntimeError("the cluster cannot be read")
        return Reading(*snapshot_from_objects(self.objects, NODE))


class Running:
    def __init__(self, daemon: Daemon, source: BreakableSource, kernel: FakeKernel) -> None:
        self.daemon, self.source, self.kernel = daemon, source, kernel

    def status(self, path: str) -> int:
        port = self.daemon.ports[0]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as error:
            return error.code

    def sample(self, name: str, **labels: str) -> float:
        return self.daemon.metrics.registry.get_sample_value(name, labels) or 0.0

    def change(self, index: int) -> None:
        self.source.objects += [service(index), endpoint_slice(index)]
        self.daemon.changed("services")

    def serves(self, index: int) -> bool:
        return any(f"10.96.0.{index + 1}" in str(key) for key in self.kernel.ipvs.dump())


@pytest.fixture
def running() -> Iterator[Running]:
    kernel = FakeKernel()
    options = DaemonOptions(
        min_sync_period=0.0,
        healthz=("127.0.0.1", 0),
        metrics=None,
        tick=0.05,
        restarts=QUICK,
    )
    daemon = Daemon(kernel.kernel(), Settings(), options)
    source = BreakableSource(cluster(1))
    stop = threading.Event()
    thread = threading.Thread(target=daemon.run, args=(source, stop))
    thread.start()
    assert daemon.synced.wait(PATIENCE)
    yield Running(daemon, source, kernel)
    stop.set()
    thread.join(PATIENCE)
    assert not thread.is_alive()


def test_a_sync_loop_that_fails_is_restarted_and_the_sync_happens(
    running: Running, caplog: pytest.LogCaptureFixture
) -> None:
    running.source.failures_left = 1
    with caplog.at_level(logging.ERROR, logger="ipvsproxy.supervise"):
        running.change(5)
        eventually(lambda: running.serves(5))
    assert running.sample("ipvsproxy_worker_failures_total", worker="sync") == 1
    [failure] = [r for r in caplog.records if "worker sync failed" in r.getMessage()]
    assert "the cluster cannot be read" in failure.getMessage()
    assert failure.exc_info is not None
    assert running.status("/livez") == 200
    assert running.status("/healthz") == 200


def test_a_sync_loop_that_cannot_run_fails_livez_until_it_runs_again(running: Running) -> None:
    running.source.failures_left = -1
    running.change(6)
    eventually(lambda: running.status("/livez") == 503)
    assert running.status("/healthz") == 503
    assert running.sample("ipvsproxy_worker_failures_total", worker="sync") >= QUICK.failing_after
    assert running.sample("ipvsproxy_worker_up", worker="sync") == 0
    assert running.sample("ipvsproxy_worker_up", worker="tick") == 1

    running.source.failures_left = 0
    eventually(lambda: running.serves(6))
    eventually(lambda: running.status("/livez") == 200)
    assert running.sample("ipvsproxy_worker_up", worker="sync") == 1
