"""The daemon's figures: one-change latency against cluster size, and its peak RSS.

The daemon runs as the DaemonSet runs it, ``ipvsproxy run --kubeconfig``, watching the api
tier's fake API server, which serves from a thread of this process on loopback inside the lab.
The cluster is applied before the daemon starts; each change is one write (or two: a Service
with its EndpointSlice) to that server, and the latency is the time from the first write to the
kernel holding the change, seen by asking IPVS for that one virtual server (O(1), so the probe
does not grow with the cluster). Three kinds of change, ``changes`` of each: a Service added,
one endpoint of its EndpointSlice replaced, the Service deleted, each with the rest of the
cluster in place.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import ipaddress
import json
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bench.cluster import (
    ENDPOINTS_PER_SERVICE,
    NODE_NAME,
    cluster_ip,
    endpoint_slice_object,
    pod_ip,
    service_object,
)
from ipvsproxy.kernel.ipvs import NetlinkIPVS
from ipvsproxy.model import IPAddress, TransportProtocol, VirtualServerKey
from tests.lab.apiserver import LabApiServer

CHANGE_KINDS = ("service_added", "endpoint_changed", "service_deleted")
# Longest wait for one change before it counts as lost.
CHANGE_TIMEOUT = 120.0
STARTUP_TIMEOUT = 3600.0
# The daemon's log line for a full sync that ended (text format).
FULL_SYNC_LOGGED = 'synced mode="full"'
# No periodic full sync inside the window unless asked (``measure_daemon``'s sync_period).
NO_FULL_SYNC = "1h"
DAEMON_FLAGS = (
    "--hostname-override",
    NODE_NAME,
    "--ipvs-min-sync-period",
    "0s",
    "--metrics-bind-address",
    "127.0.0.1:0",
    "--healthz-bind-address",
    "127.0.0.1:0",
)


@functools.cache
def daemon_available() -> bool:
    """Whether this ipvsproxy has the daemon: ``run`` takes the spec's flags."""
    done = subprocess.run(
        [sys.executable, "-m", "ipvsproxy", "run", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.returncode == 0 and "--ipvs-min-sync-period" in done.stdout


class Probe(NetlinkIPVS):
    """One virtual server's real servers and weights, without dumping the whole table."""

    def weights(self, key: VirtualServerKey) -> Mapping[IPAddress, int] | None:
        state = self.virtual_server(key)
        if state is None:
            return None
        return {real.address: rs.server.weight for real, rs in state.real_servers.items()}


def _wait(condition: Callable[[], bool], timeout: float, interval: float = 0.001) -> float | None:
    start = time.perf_counter()
    while not condition():
        if time.perf_counter() - start > timeout:
            return None
        time.sleep(interval)
    return time.perf_counter() - start


def _percentile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(fraction * 100) - 1]


def _summary(latencies: list[float]) -> dict[str, float | None]:
    milliseconds = [seconds * 1000 for seconds in latencies]
    return {"p50_ms": _percentile(milliseconds, 0.5), "p99_ms": _percentile(milliseconds, 0.99)}


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM for process {pid}")


class _Churn:
    """Adds, changes and deletes one extra service at a time; times each until the kernel has it."""

    def __init__(self, api: LabApiServer, probe: Probe, services: int, changes: int) -> None:
        self._api, self._probe = api, probe
        self._services, self._changes = services, changes
        self.latencies: dict[str, list[float]] = {kind: [] for kind in CHANGE_KINDS}
        self.lost = 0

    def _timed(self, kind: str, write: Callable[[], object], done: Callable[[], bool]) -> None:
        time.sleep(0.05)  # apart from the previous change, not timed
        start = time.perf_counter()
        write()
        if _wait(done, CHANGE_TIMEOUT) is None:
            self.lost += 1
        else:
            self.latencies[kind].append(time.perf_counter() - start)

    def round(self, number: int) -> None:
        index = self._services + number
        name = f"churn-{number}"
        key = VirtualServerKey(TransportProtocol.TCP, _address(cluster_ip(index)), 80)
        service = service_object(index, name, node_port=False)
        slice_ = endpoint_slice_object(index, name)
        first = _address(slice_["endpoints"][0]["addresses"][0])
        self._timed(
            "service_added",
            lambda: self._api.apply(service, slice_),
            lambda: self._ready(key, first),
        )
        moved = pod_ip((self._services + self._changes + number) * ENDPOINTS_PER_SERVICE)
        slice_["endpoints"][0]["addresses"] = [moved]
        self._timed(
            "endpoint_changed",
            lambda: self._api.apply(slice_),
            lambda: self._moved(key, first, _address(moved)),
        )
        self._timed(
            "service_deleted",
            lambda: self._api.delete(service, slice_),
            lambda: self._probe.weights(key) is None,
        )

    def _ready(self, key: VirtualServerKey, address: IPAddress) -> bool:
        weights = self._probe.weights(key)
        return weights is not None and len(weights) == ENDPOINTS_PER_SERVICE and address in weights

    def _moved(self, key: VirtualServerKey, old: IPAddress, new: IPAddress) -> bool:
        weights = self._probe.weights(key) or {}
        return weights.get(new, 0) > 0 and not weights.get(old, 0)


def _address(text: str) -> IPAddress:
    return ipaddress.ip_address(text)


def measure_daemon(manifest: Path, changes: int, sync_period: str = NO_FULL_SYNC) -> dict[str, Any]:
    """``sync_period``: the daemon's --ipvs-sync-period (30s puts its periodic full syncs
    inside the window)."""
    services = int(manifest.stem.rsplit("-", 1)[-1])
    folder = Path(tempfile.mkdtemp(prefix="ipvsproxy-bench-"))
    api = LabApiServer(folder).start()
    try:
        api.apply(*json.loads(manifest.read_text())["items"])
        # The fake server's copy of the cluster lives as long as this process: out of the
        # cyclic GC's sight, so no full collection of it falls inside a timed change.
        gc.freeze()
        return _measure_watching(api, services, changes, folder / "daemon.log", sync_period)
    finally:
        api.stop()
        shutil.rmtree(folder, ignore_errors=True)


def _measure_watching(
    api: LabApiServer, services: int, changes: int, log: Path, sync_period: str
) -> dict[str, Any]:
    with log.open("wb") as log_file:
        daemon = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ipvsproxy",
                "run",
                "--kubeconfig",
                str(api.kubeconfig),
                *DAEMON_FLAGS,
                "--ipvs-sync-period",
                sync_period,
            ],
            stdout=subprocess.DEVNULL,
            stderr=log_file,
        )
    try:
        with contextlib.closing(Probe()) as probe:
            last = VirtualServerKey(TransportProtocol.TCP, _address(cluster_ip(services - 1)), 80)
            # Until its first sync has ended, a change waits for the rest of it; its log says
            # when (a /metrics scrape would add to the memory measured). Asked every half
            # second: the lab's one CPU is the daemon's while it programs the cluster.
            first_sync = _wait(
                lambda: (
                    FULL_SYNC_LOGGED in log.read_text(errors="replace")
                    and probe.weights(last) is not None
                ),
                STARTUP_TIMEOUT,
                interval=0.5,
            )
            if first_sync is None or daemon.poll() is not None:
                tail = log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"ipvsproxy run did not program the cluster: {tail}")
            churn = _Churn(api, probe, services, changes)
            window_start = time.perf_counter()
            for number in range(changes):
                churn.round(number)
            window_s = time.perf_counter() - window_start
            # Whether the periodic full syncs fell inside the window, as a run's figures must
            # show rather than assume: every one the daemon logged after its first.
            full_syncs = log.read_text(errors="replace").count(FULL_SYNC_LOGGED) - 1
        everything = [value for values in churn.latencies.values() for value in values]
        overall = _summary(everything)
        return {
            "daemon_first_sync_s": first_sync,
            "latency_p50_ms": overall["p50_ms"],
            "latency_p99_ms": overall["p99_ms"],
            "latency_by_change": {kind: _summary(v) for kind, v in churn.latencies.items()},
            "latency_changes": len(everything),
            "latency_lost_changes": churn.lost,
            "latency_window_s": window_s,
            "full_syncs_in_window": full_syncs,
            "peak_rss_mb": _peak_rss_mb(daemon.pid),
        }
    finally:
        stop(daemon)


def stop(daemon: subprocess.Popen[Any]) -> None:
    """SIGTERM, as the kubelet stops it; killed if it has not left within a minute."""
    daemon.send_signal(signal.SIGTERM)
    try:
        daemon.wait(timeout=60)
    except subprocess.TimeoutExpired:
        daemon.kill()
        daemon.wait()
