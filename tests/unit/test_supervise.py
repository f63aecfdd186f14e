"""The supervisor: a worker that fails is logged once, counted, restarted with capped backoff,
and reported as unable to run when it keeps failing or its thread ends."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from ipvsproxy.supervise import RestartPolicy, Supervisor

PATIENCE = 20.0
QUICK = RestartPolicy(initial_delay=0.01, max_delay=0.04, failing_after=3, stable_after=60.0)


def eventually(predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + PATIENCE
    while not predicate():
        assert time.monotonic() < deadline, "gave up waiting"
        time.sleep(0.01)


class Script:
    """A worker's ``run`` that raises the given errors in turn, then works until stopped."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.runs = 0
        self.stopped = threading.Event()
        self.working = threading.Event()

    def run(self) -> None:
        self.runs += 1
        if self.errors:
            raise self.errors.pop(0)
        self.working.set()
        self.stopped.wait()

    def stop(self) -> None:
        self.stopped.set()


@pytest.fixture
def failures() -> list[str]:
    return []


@pytest.fixture
def supervisor(failures: list[str]) -> Iterator[Supervisor]:
    workers = Supervisor(QUICK, on_failure=failures.append)
    yield workers
    workers.stop(PATIENCE)


def test_the_restart_delay_doubles_up_to_its_cap() -> None:
    policy = RestartPolicy(initial_delay=1.0, max_delay=30.0)
    assert [policy.delay(n) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]


def test_a_failing_worker_is_restarted_counted_and_logged_once_per_failure(
    supervisor: Supervisor, failures: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    script = Script(OSError(24, "Too many open files"), FileNotFoundError("gone"))
    with caplog.at_level(logging.WARNING, logger="ipvsproxy.supervise"):
        supervisor.spawn("source-files", script.run, stop=script.stop)
        eventually(script.working.is_set)
    assert script.runs == 3
    assert failures == ["source-files", "source-files"]
    assert supervisor.failing() == []
    records = [r for r in caplog.records if "source-files failed" in r.getMessage()]
    assert len(records) == 2
    assert all(r.exc_info is not None for r in records)
    assert "Too many open files" in records[0].getMessage()


def test_the_same_error_again_is_one_line_without_traceback(
    supervisor: Supervisor, caplog: pytest.LogCaptureFixture
) -> None:
    script = Script(*(ValueError("the same") for _ in range(2)))
    with caplog.at_level(logging.WARNING, logger="ipvsproxy.supervise"):
        supervisor.spawn("sync", script.run, stop=script.stop)
        eventually(script.working.is_set)
    records = [r for r in caplog.records if "worker sync failed" in r.getMessage()]
    assert [r.exc_info is not None for r in records] == [True, False]


def test_a_worker_that_keeps_failing_cannot_run_until_it_runs_stably() -> None:
    now = [0.0]
    policy = RestartPolicy(initial_delay=0.001, max_delay=0.001, failing_after=3, stable_after=5)
    workers = Supervisor(policy, clock=lambda: now[0])
    script = Script(*(RuntimeError(str(n)) for n in range(3)))
    workers.spawn("sync", script.run, stop=script.stop)
    eventually(script.working.is_set)
    # Three quick failures in a row, and the fourth run has not yet lasted stable_after.
    assert workers.failing() == ["sync"]
    now[0] += 5
    assert workers.failing() == []
    workers.stop(PATIENCE)


def test_a_stable_run_ends_a_row_of_failures() -> None:
    now = [0.0]
    failures: list[str] = []
    policy = RestartPolicy(initial_delay=0.001, max_delay=0.001, failing_after=2, stable_after=5)
    workers = Supervisor(policy, on_failure=failures.append, clock=lambda: now[0])
    runs: list[int] = []
    stop = threading.Event()

    def run() -> None:
        runs.append(1)
        if len(runs) == 2:
            now[0] += 10  # this run lasts long enough to count as stable before it fails
        if len(runs) <= 2:
            raise RuntimeError(f"run {len(runs)}")
        stop.wait()

    workers.spawn("tick", run, stop=stop.set)
    eventually(lambda: len(runs) == 3)
    # Two failures, but not in a row: the run between them was stable.
    assert failures == ["tick", "tick"]
    assert workers.failing() == []
    workers.stop(PATIENCE)


def test_a_worker_that_returns_unasked_is_restarted(
    supervisor: Supervisor, failures: list[str]
) -> None:
    runs: list[int] = []
    done = threading.Event()

    def run() -> None:
        runs.append(1)
        if len(runs) == 3:
            done.wait()

    supervisor.spawn("http", run, stop=done.set)
    eventually(lambda: len(runs) == 3)
    assert failures == ["http", "http"]


def test_a_worker_whose_thread_ended_cannot_run(supervisor: Supervisor) -> None:
    script = Script(SystemExit(3))
    worker = supervisor.spawn("informer-services", script.run, stop=script.stop)
    eventually(lambda: not worker._thread.is_alive())
    assert supervisor.failing() == ["informer-services"]


def test_stop_interrupts_the_wait_before_a_restart() -> None:
    workers = Supervisor(RestartPolicy(initial_delay=3600.0, max_delay=3600.0))
    script = Script(RuntimeError("once"))
    worker = workers.spawn("sync", script.run, stop=script.stop)
    eventually(lambda: script.runs == 1)
    worker.stop(PATIENCE)
    assert not worker._thread.is_alive()
    assert script.runs == 1
    assert workers.running() == []


def test_stopped_workers_are_neither_running_nor_failing(supervisor: Supervisor) -> None:
    first, second = Script(), Script()
    supervisor.spawn("a", first.run, stop=first.stop)
    supervisor.spawn("b", second.run, stop=second.stop)
    eventually(lambda: first.working.is_set() and second.working.is_set())
    assert supervisor.running() == ["a", "b"]
    supervisor.stop(PATIENCE)
    assert supervisor.running() == []
    assert supervisor.failing() == []
