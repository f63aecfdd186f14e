"""Supervised threads: every long-running thread of the daemon is a worker of a Supervisor.

A worker is a function ``run()`` that works until asked to stop, and a function ``stop()`` that
asks it to (and keeps asking: a ``run`` started after ``stop`` returns at once). When ``run``
raises, or returns without being asked to, the supervisor

* logs the failure once: with its traceback the first time, one line when the same error
  comes again in a row;
* reports it to ``on_failure(worker_name)`` (the daemon counts it in a metric);
* starts ``run`` again after a delay that doubles with each failure in a row, up to a cap;
  a run that lasted ``stable_after`` seconds ends the row.

``failing()`` names the workers that cannot run: ``failing_after`` failures in a row without a
stable run since, or a thread that ended (an exception beyond ``Exception``). The daemon's
/livez turns 503 for them, so the kubelet restarts the pod.

    workers = Supervisor(on_failure=count_it)
    sync = workers.spawn("sync", runner.loop, stop=runner.stop)
    ...
    sync.stop()        # or stop_all([...]) for workers that share what stops them

Whatever makes ``run`` return must go through ``stop`` (``Worker.stop``, ``stop_all``,
``Supervisor.stop``): a ``run`` that returns before its worker was asked is a failure.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    # The delay before the first restart, doubled for each further failure in a row.
    initial_delay: float = 1.0
    max_delay: float = 30.0
    # Failures in a row after which the worker is reported as unable to run.
    failing_after: int = 5
    # A run that lasts this long ends a row of failures.
    stable_after: float = 60.0

    def delay(self, failures_in_a_row: int) -> float:
        return min(self.initial_delay * 2.0 ** max(failures_in_a_row - 1, 0), self.max_delay)


def _ignore(name: str) -> None:
    pass


class Worker:
    """One supervised thread; made and started by ``Supervisor.spawn``."""

    def __init__(
        self,
        name: str,
        run: Callable[[], None],
        stop: Callable[[], None],
        *,
        policy: RestartPolicy,
        on_failure: Callable[[str], None],
        clock: Callable[[], float],
    ) -> None:
        self.name = name
        self._run = run
        self._ask_to_stop = stop
        self._policy = policy
        self._on_failure = on_failure
        self._clock = clock
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._failures_in_a_row = 0
        # When the current run started; None while waiting to restart.
        self._running_since: float | None = None
        self._last_error = ""
        self._reported_failing = False
        self._thread = threading.Thread(target=self._supervise, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Ask the worker to stop and wait for its thread (at most ``timeout`` seconds)."""
        stop_all([self], timeout)

    def request_stop(self) -> None:
        """Ask the worker to stop, without waiting: from here on, its return is no failure."""
        if not self._stopping.is_set():
            self._stopping.set()
            try:
                self._ask_to_stop()
            except Exception:
                log.exception("worker %s: stopping it failed", self.name)

    def join(self, timeout: float | None = None) -> None:
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def stopped(self) -> bool:
        return self._stopping.is_set()

    def failing(self) -> bool:
        """Whether the worker cannot run: it keeps failing, or its thread ended unasked."""
        if self._stopping.is_set():
            return False
        if not self._thread.is_alive():
            return self._thread.ident is not None
        with self._lock:
            if self._failures_in_a_row < self._policy.failing_after:
                return False
            since = self._running_since
            return since is None or self._clock() - since < self._policy.stable_after

    def _supervise(self) -> None:
        try:
            while not self._stopping.is_set():
                error = self._run_once()
                if self._stopping.is_set():
                    return
                self._restart_after(error)
        except BaseException as error:
            # Not ours to swallow (SystemExit and the like); the thread ends, failing() says so.
            log.critical("worker %s ended: %r; it cannot run any more", self.name, error)

    def _run_once(self) -> Exception | None:
        """Run once; the exception it ended with, None if it returned."""
        started = self._clock()
        with self._lock:
            self._running_since = started
        try:
            self._run()
            error = None
        except Exception as raised:
            error = raised
        with self._lock:
            self._running_since = None
            if self._clock() - started >= self._policy.stable_after:
                self._failures_in_a_row = 0
                self._reported_failing = False
                self._last_error = ""
        return error

    def _restart_after(self, error: Exception | None) -> None:
        with self._lock:
            self._failures_in_a_row += 1
            in_a_row = self._failures_in_a_row
        delay = self._policy.delay(in_a_row)
        what = "returned unasked" if error is None else f"{type(error).__name__}: {error}"
        fields = {"worker": self.name, "failures_in_a_row": in_a_row, "restart_in": delay}
        if what != self._last_error:
            log.error(
                "worker %s failed: %s; restarting in %.1f s",
                self.name,
                what,
                delay,
                exc_info=error,
                extra=fields,
            )
        else:
            log.warning(
                "worker %s failed again: %s; restarting in %.1f s",
                self.name,
                what,
                delay,
                extra=fields,
            )
        self._last_error = what
        self._on_failure(self.name)
        if in_a_row >= self._policy.failing_after and not self._reported_failing:
            self._reported_failing = True
            log.error(
                "worker %s cannot run: %d failures in a row; /livez fails until it runs",
                self.name,
                in_a_row,
                extra=fields,
            )
        self._stopping.wait(delay)


class Supervisor:
    """Starts workers, restarts them when they fail, and tells which cannot run.

    Thread-safe: workers may be spawned and stopped from any thread.
    """

    def __init__(
        self,
        policy: RestartPolicy = RestartPolicy(),
        on_failure: Callable[[str], None] = _ignore,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._policy = policy
        self._on_failure = on_failure
        self._clock = clock
        self._lock = threading.Lock()
        self._workers: list[Worker] = []

    def spawn(self, name: str, run: Callable[[], None], stop: Callable[[], None]) -> Worker:
        """Start ``run`` on a thread called ``name``; ``stop`` must make it return."""
        worker = Worker(
            name, run, stop, policy=self._policy, on_failure=self._on_failure, clock=self._clock
        )
        with self._lock:
            self._workers = [w for w in self._workers if not w.stopped]
            self._workers.append(worker)
        worker.start()
        return worker

    def failing(self) -> list[str]:
        """The names of the workers that cannot run."""
        with self._lock:
            workers = list(self._workers)
        return [worker.name for worker in workers if worker.failing()]

    def running(self) -> list[str]:
        """The names of the workers not stopped, failing or not."""
        with self._lock:
            return [worker.name for worker in self._workers if not worker.stopped]

    def stop(self, timeout: float | None = None) -> None:
        """Stop every worker."""
        with self._lock:
            workers = list(reversed(self._workers))
        stop_all(workers, timeout)


def stop_all(workers: Iterable[Worker], timeout: float | None = None) -> None:
    """Ask every one of ``workers`` to stop, then wait for each (at most ``timeout`` seconds).

    Workers that share what stops them (an event, a queue) must be stopped together this way:
    one stopped alone could make another return before it is asked, which is a failure.
    """
    asked = list(workers)
    for worker in asked:
        worker.request_stop()
    for worker in asked:
        worker.join(timeout)
