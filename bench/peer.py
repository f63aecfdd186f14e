"""ipvsproxy beside the real kube-proxy: the same API server, cluster, changes and kernel.

``python -m tests.lab --run python -m bench.peer --out FILE --sizes 1000 --runs 3`` (``nox -s
bench -- --peer kube-proxy`` does it; the control plane built first). In one lab boot: etcd and
kube-apiserver (``tests.lab.controlplane``), N Services x 10 endpoints (``bench.cluster``)
created through it; then, per run, each proxy in turn (the order alternating between runs) in
a network namespace of its own, a fresh kernel, the node's address on a veth to the root
namespace where the API server listens. Never both at once: one proxy's namespace is emptied
(kube-proxy's own ``--cleanup`` first) and deleted before the other starts.

Each proxy runs as it ships: the same KubeProxyConfiguration file, the sync periods of our
chart for ipvsproxy and kube-proxy's defaults for kube-proxy (both written in the output's
``settings``). Per run:

* ``first_sync_s``: from the process start until its first sync has ended (its
  ``kubeproxy_sync_proxy_rules_duration_seconds`` counted one) and the last Service's virtual
  server has its real servers in IPVS;
* ``full_sync_s``: the next periodic sync of the unchanged cluster (kube-proxy's is a full sync
  every time: its histogram's mean over the syncs that came; ours: the ``synced mode="full"``
  log line's seconds);
* Services added, EndpointSlices changed and Services deleted through the API server as a
  cluster makes them: a Poisson stream of ``--changes`` of each kind at ``--rate`` a second,
  then a burst of ``--burst`` of each, every change timed on its own from its first write to
  the kernel holding it (``bench.stream``), with the periodic full sync running;
  ``cpu_s_per_100_changes`` is the proxy's CPU (its children's included: kube-proxy runs
  ``ipset`` and both run ``iptables-restore``) over that window;
* ``peak_rss_mb``: the process's VmHWM at the end.

Writes one JSON object to ``--out`` after every run (a boot that dies late keeps what it
measured); ``bench.report --peer`` turns it into the report.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from bench.cluster import NODE_ADDRESS, NODE_NAME, cluster_ip, endpoint_slice_object, service_object
from bench.daemon_latency import Probe, _address, _peak_rss_mb, _summary, _wait, stop
from bench.lab_scale import empty_kernel, log
from bench.stream import StreamSettings, clean_up, plan, prepare, run_phases, summary
from ipvsproxy.kernel.iptables.backend import detect_backend
from ipvsproxy.model import TransportProtocol, VirtualServerKey
from tests.controlplane.build import located
from tests.controlplane.cluster import ApiError, ControlPlane
from tests.lab.controlplane import LabControlPlane, lab_binaries
from tests.lab.kube_proxy import iptables_links
from tests.lab.netns import inside, ip_batch, sh

PROXIES = ("ipvsproxy", "kube_proxy")
FOLDER = Path("/run/ipvsproxy-bench-peer")
CHART_VALUES = Path(__file__).resolve().parent.parent / "charts/ipvsproxy/values.yaml"
METRICS = "127.0.0.1:10249"
SYNC_DURATION = "kubeproxy_sync_proxy_rules_duration_seconds"
FULL_SYNC_LINE = re.compile(r' synced mode="full" .*?seconds=([0-9.]+)')
ROOT_VETH, ROOT_SIDE = "bench-node", "192.168.0.254"
# The API server allocates 10.96.0.1 to the `kubernetes` Service and refuses the network's
# own address: the bench's services start after them.
FIRST_INDEX = 2
# kube-proxy's first sync took 19 minutes at 5,000 Services, and grows faster than the cluster.
STARTUP_TIMEOUT = 5400.0
# A periodic sync comes within syncPeriod (30 s); this bounds a hung proxy, no timer.
FULL_SYNC_TIMEOUT = 300.0
APPLY = "application/apply-patch+yaml"
JSON = "application/json"
NOT_FOUND = 404
WRITE_ATTEMPTS = 4
WRITERS = 4


@dataclass(frozen=True)
class Settings:
    """The sync periods each proxy runs with, and where they come from; how changes arrive."""

    ipvsproxy: dict[str, str]
    kube_proxy: dict[str, str]
    changes: StreamSettings
    # --min-sync-period: both proxies' minSyncPeriod instead of what each ships with.
    min_sync_period: str | None = None

    def periods(self, kind: str) -> dict[str, str]:
        """What the proxy's configuration sets; empty leaves kube-proxy's defaults."""
        shipped = self.ipvsproxy if kind == "ipvsproxy" else {}
        if self.min_sync_period is None:
            return shipped
        return {**shipped, "minSyncPeriod": self.min_sync_period}

    def as_json(self) -> dict[str, Any]:
        overridden = self.min_sync_period is not None
        override = {"minSyncPeriod": self.min_sync_period} if overridden else {}
        note = f", minSyncPeriod {self.min_sync_period} (--min-sync-period)" if overridden else ""
        return {
            "changes": self.changes.as_json(),
            "ipvsproxy": {
                **self.ipvsproxy,
                **override,
                "source": f"charts/ipvsproxy/values.yaml (ipvs.*){note}",
            },
            "kube_proxy": {
                **self.kube_proxy,
                **override,
                "source": f"kube-proxy's defaults (--write-config-to){note}",
            },
        }


def chart_sync_periods() -> dict[str, str]:
    ipvs = yaml.safe_load(CHART_VALUES.read_text())["ipvs"]
    return {"syncPeriod": str(ipvs["syncPeriod"]), "minSyncPeriod": str(ipvs["minSyncPeriod"])}


def kube_proxy_defaults(binary: Path) -> dict[str, str]:
    """kube-proxy's own defaults for IPVS mode, as the binary writes them."""
    written = FOLDER / "kube-proxy-defaults.yaml"
    subprocess.run(
        [str(binary), "--proxy-mode=ipvs", f"--write-config-to={written}"],
        check=True,
        capture_output=True,
    )
    ipvs = yaml.safe_load(written.read_text())["ipvs"]
    return {"syncPeriod": str(ipvs["syncPeriod"]), "minSyncPeriod": str(ipvs["minSyncPeriod"])}


def proxy_config(kubeconfig: Path, sync_periods: dict[str, str]) -> dict[str, Any]:
    """One node's KubeProxyConfiguration; ``sync_periods`` empty leaves the proxy's defaults."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "ipvs",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": NODE_NAME,
        "clusterCIDR": "10.128.0.0/9",
        "metricsBindAddress": METRICS,
        "healthzBindAddress": "127.0.0.1:10256",
        # The lab kernel's conntrack is no node's to tune: both leave it alone.
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
        "ipvs": {"scheduler": "rr", **sync_periods},
    }


class ApiWriter:
    """What ``_Churn`` writes, through the real API server: server-side apply and delete."""

    def __init__(self, plane: ControlPlane) -> None:
        self._plane = plane

    def apply(self, *objects: dict[str, Any]) -> None:
        for obj in objects:
            body = {"apiVersion": _api_version(obj), **obj}
            if obj["kind"] == "Service":
                # The API server takes clusterIPs only with the clusterIP they start with.
                body["spec"] = {**obj["spec"], "clusterIP": obj["spec"]["clusterIPs"][0]}
            query = "?fieldManager=bench&force=true"
            self._patient("PATCH", _path(obj) + query, body, content_type=APPLY)

    def ping(self) -> None:
        self._patient("GET", "/version")

    def delete(self, *objects: dict[str, Any]) -> None:
        for obj in objects:
            try:
                self._patient("DELETE", _path(obj))
            except ApiError as error:
                # A retried delete whose first attempt went through.
                if error.status != NOT_FOUND:
                    raise

    def _patient(self, method: str, path: str, body: Any = None, content_type: str = JSON) -> None:
        """One request, again after a read that timed out: in the lab the API server shares
        the one CPU with kube-proxy's syncs, which starved it past 30 s in one run. Applies
        and deletes may be repeated; the wait counts in the change's latency."""
        for attempt in range(WRITE_ATTEMPTS):
            try:
                self._plane.request(method, path, body, content_type=content_type)
                return
            except TimeoutError:
                if attempt == WRITE_ATTEMPTS - 1:
                    raise


def _api_version(obj: dict[str, Any]) -> str:
    return "discovery.k8s.io/v1" if obj["kind"] == "EndpointSlice" else "v1"


def _path(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    match obj["kind"]:
        case "Namespace":
            return f"/api/v1/namespaces/{meta['name']}"
        case "Node":
            return f"/api/v1/nodes/{meta['name']}"
        case "Service":
            return f"/api/v1/namespaces/{meta['namespace']}/services/{meta['name']}"
        case "EndpointSlice":
            namespace, name = meta["namespace"], meta["name"]
            return f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices/{name}"
    raise ValueError(f"no path for {obj['kind']}")


def create_cluster(plane: ControlPlane, services: int, start: int = 0) -> float:
    """The node and Services ``start`` to ``services`` with their EndpointSlices; the seconds
    it took."""
    started = time.perf_counter()
    writer = ApiWriter(plane)
    node = {"kind": "Node", "metadata": {"name": NODE_NAME}}
    try:
        writer.apply(node)
    except ApiError as error:
        raise RuntimeError(f"the node was refused: {error}") from error
    plane.request(
        "PATCH",
        f"/api/v1/nodes/{NODE_NAME}/status",
        {"status": {"addresses": [{"type": "InternalIP", "address": NODE_ADDRESS}]}},
        content_type="application/merge-patch+json",
    )
    indices = range(FIRST_INDEX + start, FIRST_INDEX + services)
    # Every namespace the cluster's services use (they cycle), the churn's too.
    namespaces = {service_object(index)["metadata"]["namespace"] for index in range(1000)}
    writer.apply(*({"kind": "Namespace", "metadata": {"name": name}} for name in namespaces))

    def one(index: int) -> None:
        writer.apply(service_object(index), endpoint_slice_object(index))
        if index % 500 == 0:
            log(f"created up to service {index}")

    with ThreadPoolExecutor(WRITERS) as pool:
        list(pool.map(one, indices))
    return time.perf_counter() - started


@contextmanager
def node_namespace(name: str) -> Iterator[None]:
    """A fresh network namespace as the node, reaching the API server; emptied and gone after."""
    sh("ip", "netns", "add", name)
    try:
        ip_batch(
            [
                f"link add {ROOT_VETH} type veth peer name eth0 netns {name}",
                f"addr add {ROOT_SIDE}/24 dev {ROOT_VETH}",
                f"link set {ROOT_VETH} up",
            ]
        )
        ip_batch(
            [
                "link set lo up",
                f"addr add {NODE_ADDRESS}/24 dev eth0",
                "link set eth0 up",
                f"route add default via {ROOT_SIDE}",
            ],
            namespace=name,
        )
        with inside(name):
            try:
                yield
            finally:
                try:
                    empty_kernel()
                except (OSError, RuntimeError, subprocess.SubprocessError) as error:
                    log(f"{name}: emptying the kernel: {error}")
    finally:
        # The pair goes at once with its root end; with the namespace, it would linger while
        # the kernel tears down the namespace's table (minutes after a big one) and the next
        # run's pair could not take its name.
        subprocess.run(["ip", "link", "del", ROOT_VETH], stderr=subprocess.DEVNULL, check=False)
        sh("ip", "netns", "del", name)


@dataclass
class Proxy:
    """One proxy's command and how to read what it says."""

    kind: str
    command: list[str]
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log_path.open("wb") as log_file:
            self.process = subprocess.Popen(
                self.command,
                stdout=subprocess.DEVNULL,
                stderr=log_file,
                stdin=subprocess.DEVNULL,
                env=self.env,
            )

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def check_alive(self) -> None:
        assert self.process is not None
        if self.process.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{self.kind} exited with {self.process.returncode}: {tail}")

    def sync_histogram(self) -> tuple[int, float]:
        """How many syncs have ended, and their seconds in all (IPv4's, for kube-proxy)."""
        try:
            with urllib.request.urlopen(f"http://{METRICS}/metrics", timeout=10) as reply:
                text = reply.read().decode()
        except OSError:
            return 0, 0.0
        count, total = 0, 0.0
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.labels.get("ip_family", "IPv4") != "IPv4":
                    continue
                if sample.name == f"{SYNC_DURATION}_count":
                    count += int(sample.value)
                elif sample.name == f"{SYNC_DURATION}_sum":
                    total += sample.value
        return count, total

    def syncs_ended(self) -> int:
        """Ours by its log: a /metrics scrape of ours reads the IPVS table for its traffic
        counters, which asked every half second would load the daemon it measures."""
        if self.kind == "ipvsproxy":
            return len(self.full_syncs_logged())
        return self.sync_histogram()[0]

    def full_syncs_logged(self) -> list[float]:
        return [float(s) for s in FULL_SYNC_LINE.findall(self.log_path.read_text(errors="replace"))]


def cpu_seconds(pid: int) -> tuple[float, float]:
    """The process's user and system CPU, and that of the children it has waited for."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(value) for value in fields[11:15])
    tick = os.sysconf("SC_CLK_TCK")
    return (utime + stime) / tick, (cutime + cstime) / tick


def _full_sync(proxy: Proxy) -> float:
    """The seconds of the next periodic full sync of the unchanged cluster."""
    if proxy.kind == "ipvsproxy":
        seen = len(proxy.full_syncs_logged())  # the first sync's line is one of them
        waited = _wait(lambda: len(proxy.full_syncs_logged()) > seen, FULL_SYNC_TIMEOUT, 0.5)
        if waited is None:
            raise RuntimeError("ipvsproxy logged no periodic full sync")
        return proxy.full_syncs_logged()[seen]
    count, total = proxy.sync_histogram()
    waited = _wait(lambda: proxy.sync_histogram()[0] > count, FULL_SYNC_TIMEOUT, 0.5)
    if waited is None:
        raise RuntimeError("kube-proxy made no periodic sync")
    later_count, later_total = proxy.sync_histogram()
    return (later_total - total) / (later_count - count)


def measure_proxy(
    proxy: Proxy, writer: ApiWriter, services: int, stream_settings: StreamSettings, churn_base: int
) -> dict[str, Any]:
    """One run of one proxy, in the node namespace the caller entered."""
    last = FIRST_INDEX + services - 1
    last_key = VirtualServerKey(TransportProtocol.TCP, _address(cluster_ip(last)), 80)
    started = time.perf_counter()
    proxy.start()
    try:
        with contextlib.closing(Probe()) as probe:

            def first_synced() -> bool:
                proxy.check_alive()
                return bool(probe.weights(last_key)) and proxy.syncs_ended() >= 1

            if _wait(first_synced, STARTUP_TIMEOUT, interval=0.5) is None:
                raise RuntimeError(f"{proxy.kind} did not program the cluster in time")
            first_sync = time.perf_counter() - started
            log(f"{proxy.kind}: first sync {first_sync:.1f} s")
            full_sync = _full_sync(proxy)
            log(f"{proxy.kind}: full sync {full_sync:.2f} s")
            synced = {"first_sync_s": first_sync, "full_sync_s": full_sync}
            changes = plan(stream_settings, churn_base)
            try:
                prepare(writer, probe, changes)
                # Not timed: the connection idle through the waits above is made again here.
                writer.ping()
                cpu_before, churn_started = cpu_seconds(proxy.pid), time.perf_counter()
                timings = run_phases(writer, probe, changes)
                own, children = (
                    b - a for a, b in zip(cpu_before, cpu_seconds(proxy.pid), strict=True)
                )
                churn_s = time.perf_counter() - churn_started
                clean_up(writer, changes)
            except (OSError, ApiError, RuntimeError) as error:
                # What was measured before stays: the sync figures of a run whose changes failed.
                return {**synced, "failure": f"changes: {error}"}
            cpu = own + children
        proxy.check_alive()
        measured = summary(timings)
        samples = measured["latency_samples_ms"].values()
        overall = _summary([value / 1000 for values in samples for value in values])
        made = measured["latency_changes"]
        return {
            **synced,
            "latency_p50_ms": overall["p50_ms"],
            "latency_p99_ms": overall["p99_ms"],
            "latency_by_change": {
                kind: _summary([v / 1000 for v in values])
                for kind, values in measured["latency_samples_ms"].items()
            },
            **measured,
            "churn_s": churn_s,
            "cpu_s_per_100_changes": cpu * 100 / made if made else None,
            "cpu_children_share": children / cpu if cpu else None,
            "peak_rss_mb": _peak_rss_mb(proxy.pid),
        }
    finally:
        assert proxy.process is not None
        stop(proxy.process)


@dataclass(frozen=True)
class Bench:
    """What every run shares: the API server, the settings, kube-proxy's binary."""

    writer: ApiWriter
    kubeconfig: Path
    settings: Settings
    binaries: Path
    iptables_backend: str
    logs: Path


def make_proxy(kind: str, folder: Path, bench: Bench) -> Proxy:
    """The proxy's command, on its configuration file as it ships."""
    periods = bench.settings.periods(kind)
    config = folder / f"{kind}.yaml"
    # JSON is YAML: both read it as their KubeProxyConfiguration.
    config.write_text(json.dumps(proxy_config(bench.kubeconfig, periods), indent=2))
    log_path = folder / f"{kind}.log"
    if kind == "ipvsproxy":
        command = [sys.executable, "-m", "ipvsproxy", "run", f"--config={config}"]
        return Proxy(kind, command, dict(os.environ), log_path)
    path = iptables_links(folder / "bin", bench.iptables_backend)
    env = {**os.environ, "PATH": f"{path}:{os.environ.get('PATH', '')}"}
    return Proxy(kind, [str(bench.binaries / "kube-proxy"), f"--config={config}"], env, log_path)


def kube_proxy_cleanup(proxy: Proxy) -> None:
    """``kube-proxy --cleanup``, as an operator runs it before another proxy takes the node."""
    done = subprocess.run(
        [*proxy.command, "--cleanup"], env=proxy.env, capture_output=True, check=False
    )
    if done.returncode != 0:
        log(f"kube-proxy --cleanup: {done.returncode}: {done.stderr.decode()[-500:]}")


def run_once(kind: str, number: int, services: int, bench: Bench) -> dict[str, Any]:
    folder = FOLDER / f"{kind}-{services}-{number}"
    folder.mkdir(parents=True, exist_ok=True)
    proxy = make_proxy(kind, folder, bench)
    # Each run's changes have addresses and pods of their own: nothing waits on a release.
    span = bench.settings.changes.span()
    churn_base = FIRST_INDEX + services + (number * len(PROXIES) + PROXIES.index(kind)) * span
    with node_namespace(f"peer-{kind.replace('_', '-')}-{number}"):
        try:
            return measure_proxy(proxy, bench.writer, services, bench.settings.changes, churn_base)
        finally:
            if kind == "kube_proxy":
                kube_proxy_cleanup(proxy)
            # Kept beside the output: /run goes with the boot.
            bench.logs.mkdir(parents=True, exist_ok=True)
            shutil.copy(proxy.log_path, bench.logs / f"{kind}-{services}-{number}.log")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sizes", default="1000")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--changes", type=int, default=80, help="changes of each kind in a run's Poisson stream"
    )
    parser.add_argument("--rate", type=float, default=4.0, help="the stream's changes a second")
    parser.add_argument("--burst", type=int, default=20, help="changes of each kind in the burst")
    parser.add_argument(
        "--proxies", default=",".join(PROXIES), help="which to run (to add runs of one)"
    )
    parser.add_argument(
        "--kube-proxy-runs",
        type=int,
        help="kube-proxy's runs per size when fewer than --runs (at 10,000 one takes an hour)",
    )
    parser.add_argument(
        "--min-sync-period",
        help="both proxies' minSyncPeriod (e.g. 0s), instead of what each ships with",
    )
    args = parser.parse_args()
    built = located()
    if built is None:
        raise SystemExit("bench.peer: build the control plane first (nox -s controlplane)")
    FOLDER.mkdir(parents=True, exist_ok=True)
    binaries = lab_binaries(built, FOLDER / "kube-proxy-bin", ("kube-proxy",))
    stream = StreamSettings(args.changes, args.rate, args.burst)
    settings = Settings(
        chart_sync_periods(),
        kube_proxy_defaults(binaries / "kube-proxy"),
        stream,
        args.min_sync_period,
    )
    results: dict[str, Any] = {"settings": settings.as_json(), "sizes": {}}
    lab = LabControlPlane().start()
    try:
        plane = lab.ready()
        bench = Bench(
            ApiWriter(plane),
            plane.kubeconfig,
            settings,
            binaries,
            detect_backend(),
            args.out.parent / "peer-logs",
        )
        created = 0
        for size in (int(size) for size in args.sizes.split(",")):
            # A bigger size adds to the cluster the smaller one made.
            seconds = create_cluster(plane, size, start=created)
            created = size
            log(f"{size} services created in {seconds:.0f} s")
            runs: dict[str, Any] = {kind: [] for kind in PROXIES}
            results["sizes"][str(size)] = {"create_s": seconds, "runs": runs}
            for number in range(args.runs):
                chosen = [
                    kind
                    for kind in PROXIES
                    if kind in args.proxies.split(",")
                    and (kind != "kube_proxy" or number < (args.kube_proxy_runs or args.runs))
                ]
                order = chosen if number % 2 == 0 else chosen[::-1]
                for kind in order:
                    log(f"{size} services, run {number + 1}: {kind}")
                    try:
                        runs[kind].append(run_once(kind, number, size, bench))
                    except (OSError, RuntimeError, ApiError, subprocess.SubprocessError) as error:
                        runs[kind].append({"failure": str(error)[-3000:]})
                        log(f"{kind}: failed: {error}")
                    args.out.write_text(json.dumps(results, indent=2))
    finally:
        lab.stop()
    results["lab_loadavg"] = Path("/proc/loadavg").read_text().split()[:3]
    args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
