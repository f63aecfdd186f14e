"""The daemon's memory outside the lab: VmHWM and VmRSS of ``ipvsproxy run --kubeconfig``.

The daemon is the real CLI command in a process of its own, watching the api tier's fake API
server (a thread of this process, on loopback), with one difference from a node: its kernel is
the in-memory FakeKernel (this machine has no IPVS), so the figures include the fake's copy of
the IPVS table, which a real kernel keeps outside the process. Phases, each followed by a
reading of /proc/PID/status once the daemon is idle:

1. ``first_sync``: the initial lists and the first full sync of the whole cluster (also its
   wall time from the process start, ``first_sync_s``, and the daemon's CPU seconds by then,
   ``first_sync_cpu_s``);
2. ``changes``: ``--changes`` changes, one at a time (an EndpointSlice moved, a Service added,
   one deleted, in turn), each waited for, with full resyncs every ``--sync-period``;
3. ``scrapes``: three /metrics scrapes (the per-service traffic counters read the IPVS table);
4. ``relist``: the API server restarts having forgotten its watch history, so each informer
   gets 410 Gone and lists again while its old store is still in use.

Sizes run interleaved, ``--rounds`` times (the machine is shared: a slow neighbour then
touches every size alike). ``python -m bench.daemon_memory --sizes 1000,10000 --rounds 2``
prints one JSON object: per size, a list of rounds, each with VmHWM and VmRSS in MB after
each phase.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import ipvsproxy.daemon.main as daemon_main
from bench.cluster import (
    ENDPOINTS_PER_SERVICE,
    NODE_NAME,
    cluster_objects,
    endpoint_slice_object,
    service_object,
)
from bench.daemon_latency import stop
from ipvsproxy import cli
from ipvsproxy.kernel.testing import FakeKernel
from tests.api.fake_apiserver import FakeApiServer

PHASES = ("first_sync", "changes", "scrapes", "relist")
STARTUP_TIMEOUT = 1800.0
CHANGE_TIMEOUT = 120.0
# A daemon that has written no sync for this long after the last one is taken as idle.
QUIET = 0.3


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _memory_mb(pid: int) -> dict[str, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmHWM", "VmRSS"):
            fields[name.lower() + "_mb"] = round(int(value.split()[0]) / 1024, 1)
    return fields


def _cpu_s(pid: int) -> float:
    """The process's user and system CPU seconds so far (proc(5): fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return round((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), 2)


class _SyncLog:
    """The daemon's "synced" log lines (JSON on its stderr), counted as they arrive."""

    def __init__(self, stream: Any) -> None:
        self._condition = threading.Condition()
        self.count = 0
        self.relists = 0
        self.last_at = 0.0
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            try:
                entry = json.loads(line)
            except ValueError:
                sys.stderr.write(line)
                continue
            if entry.get("level") in ("error", "warning"):
                sys.stderr.write(line)
            message = str(entry.get("msg"))
            if "; listing " in message and " again" in message:
                with self._condition:
                    self.relists += 1
            if message == "synced":
                with self._condition:
                    self.count += 1
                    self.last_at = time.monotonic()
                    self._condition.notify_all()

    def wait_for_relists(self, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._condition:
            while self.relists < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RuntimeError("the daemon did not list again in time")
                self._condition.wait(min(remaining, QUIET))

    def wait_after(self, count: int, timeout: float) -> None:
        """Until a sync after the ``count``-th has been logged and none followed for QUIET."""
        deadline = time.monotonic() + timeout
        with self._condition:
            while self.count <= count or time.monotonic() - self.last_at < QUIET:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RuntimeError("the daemon did not sync in time")
                self._condition.wait(min(remaining, QUIET))


def run_daemon(kubeconfig: str, metrics_port: int, sync_period: str) -> None:
    """In the child: ``ipvsproxy run`` as the CLI runs it, on the in-memory kernel."""
    fake = FakeKernel()

    @contextlib.contextmanager
    def fake_kernel(**_: object) -> Iterator[Any]:
        yield fake.kernel()

    def no_check() -> None:
        pass

    # What runs as root against the machine's kernel, and nothing else, is swapped.
    on_fake_kernel = mock.patch.multiple(
        daemon_main,
        real_kernel=fake_kernel,
        require_net_admin=no_check,
        NetlinkIPVS=lambda: contextlib.nullcontext(fake.ipvs),
    )
    with on_fake_kernel:
        _run_cli(kubeconfig, metrics_port, sync_period)


def _run_cli(kubeconfig: str, metrics_port: int, sync_period: str) -> None:
    cli.main(
        [
            "run",
            "--kubeconfig",
            kubeconfig,
            "--hostname-override",
            NODE_NAME,
            "--ipvs-min-sync-period",
            "0s",
            "--ipvs-sync-period",
            sync_period,
            "--metrics-bind-address",
            f"127.0.0.1:{metrics_port}",
            "--healthz-bind-address",
            "127.0.0.1:0",
            "--logging-format",
            "json",
        ]
    )


class _Changes:
    """One extra service added, its endpoints moved, deleted, in turn; or an existing
    service's endpoints moved."""

    def __init__(self, api: FakeApiServer, services: int) -> None:
        self._api, self._services = api, services

    def make(self, number: int) -> None:
        index = self._services + number // 3
        name = f"churn-{number // 3}"
        match number % 3:
            case 0:
                self._api.apply(service_object(index, name, node_port=False))
                self._api.apply(endpoint_slice_object(index, name))
            case 1:
                # Any existing service's slice, moved to pods no other slice uses.
                existing = number * 7919 % self._services
                moved = (self._services * 2 + number) * ENDPOINTS_PER_SERVICE
                self._api.apply(endpoint_slice_object(existing, first_pod=moved))
            case _:
                namespace = f"ns-{index % 50}"
                self._api.delete("EndpointSlice", namespace, f"{name}-abcde")
                self._api.delete("Service", namespace, name)


def measure(services: int, changes: int, sync_period: str) -> dict[str, Any]:
    with FakeApiServer() as api, tempfile.TemporaryDirectory() as folder:
        for obj in cluster_objects(services):
            api.apply(obj)
        kubeconfig = api.write_kubeconfig(Path(folder) / "kubeconfig")
        metrics_port = _free_port()
        command = [sys.executable, "-m", "bench.daemon_memory", "--daemon", str(kubeconfig)]
        command += ["--metrics-port", str(metrics_port), "--sync-period", sync_period]
        started = time.monotonic()
        daemon = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
        try:
            syncs = _SyncLog(daemon.stderr)
            syncs.wait_after(0, STARTUP_TIMEOUT)
            result: dict[str, Any] = {
                "first_sync_s": round(syncs.last_at - started, 2),
                "first_sync_cpu_s": _cpu_s(daemon.pid),
            }
            result["first_sync"] = _memory_mb(daemon.pid)
            churn = _Changes(api, services)
            for number in range(changes):
                seen = syncs.count
                churn.make(number)
                syncs.wait_after(seen, CHANGE_TIMEOUT)
            result["changes"] = _memory_mb(daemon.pid)
            for _ in range(3):
                _scrape(metrics_port)
            result["scrapes"] = _memory_mb(daemon.pid)
            seen = syncs.count
            # A restart that forgot the history, with a write in between: every watch
            # resumes from a version the server no longer has.
            api.stop()
            api.apply(cluster_objects(0)[0])
            api.compact()
            api.start()
            syncs.wait_for_relists(3, CHANGE_TIMEOUT)
            syncs.wait_after(seen, CHANGE_TIMEOUT)
            result["relist"] = _memory_mb(daemon.pid)
            return result
        finally:
            stop(daemon)


def _scrape(port: int) -> None:
    """One /metrics answer, read whole."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as answer:
        answer.read()


def _medians(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        phase: {
            field: statistics.median(r[phase][field] for r in rounds) for field in rounds[0][phase]
        }
        for phase in PHASES
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--changes", type=int, default=100)
    parser.add_argument("--sync-period", default="30s", help="the daemon's --ipvs-sync-period")
    parser.add_argument("--daemon", metavar="KUBECONFIG", help=argparse.SUPPRESS)
    parser.add_argument("--metrics-port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.daemon:
        run_daemon(args.daemon, args.metrics_port, args.sync_period)
        return
    sizes = [int(size) for size in args.sizes.split(",")]
    results: dict[str, list[dict[str, Any]]] = {str(size): [] for size in sizes}
    for _ in range(args.rounds):
        for size in sizes:
            measured = measure(size, args.changes, args.sync_period)
            print(json.dumps({"services": size, **measured}), file=sys.stderr, flush=True)
            results[str(size)].append(measured)
    summary = {size: {"median": _medians(r), "rounds": r} for size, r in results.items()}
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
