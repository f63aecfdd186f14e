"""An attacker on the pod network floods the node's health ports with idle TCP connections,
opening again whichever the proxy closes, while ``ipvsproxy run`` keeps syncing.

The test starts the daemon with the descriptor limits it chooses (systemd's soft 1024, with a
hard limit of 1024 or above it), and checks during and after the flood: /healthz and the
health-check node port answer, a manifest change reaches IPVS, the daemon holds a bounded
number of threads, descriptors and memory, and logs no traceback and no EMFILE."""

from __future__ import annotations

import resource
import selectors
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.daemon_kit import NODE, endpoint_slice, service, service_ip
from tests.daemon_kit import node as node_manifest
from tests.kernel.test_run_daemon import pointing_at, write
from tests.lab.daemon import START_TIMEOUT, Metrics, free_port
from tests.lab.netns import Client, Node, Pod, sh
from tests.lab.traffic import APPLY_TIMEOUT, http_get, wait_until

# The daemon's own limit, set in its process before Python starts it.
LIMITED_RUN = (
    "import os, resource, sys\n"
    "resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), int(sys.argv[2])))\n"
    "os.execv(sys.executable, [sys.executable, '-m', 'ipvsproxy', 'run', *sys.argv[3:]])\n"
)
# Bounds for what the daemon may hold under the flood: a thread per connection made 3,007
# threads and 141 MB of 3,000 connections; these are far from both, and far above the ~10
# threads the daemon has.
MAX_THREADS = 32
MAX_RSS_GROWTH_KB = 40_000
# The LoadBalancer Service whose health-check node port is flooded too, and by how much.
HEALTH_CHECKED = 9
HEALTH_CHECK_FLOOD = 200
# Inside --service-node-port-range, as a health-check node port must be.
HEALTH_CHECK_NODE_PORT = 32109
LOCAL = Client(None, timeout=10)


@dataclass(frozen=True)
class Limits:
    soft: int
    hard: int
    # Connections the attacker keeps open to /healthz's port.
    flood: int
    # What the daemon should run with: the hard limit (raised at start, as Go's runtime does).
    expected_soft: int
    # The most HTTP connections the daemon may hold: a quarter of its descriptors, <= 1024.
    max_connections: int


SYSTEMD_DEFAULT = Limits(soft=1024, hard=1024, flood=1100, expected_soft=1024, max_connections=256)
RAISED = Limits(soft=1024, hard=16384, flood=3000, expected_soft=16384, max_connections=1024)


class Flood:
    """``count`` idle connections to each target, kept open from a thread of its own: every
    one the server closes is opened again at once, until ``stop``."""

    def __init__(self, client: Client, targets: dict[tuple[str, int], int]) -> None:
        self._client = client
        self._targets = targets
        self._selector = selectors.DefaultSelector()
        self._stop = threading.Event()
        self.opened = 0
        self.closed_by_server = 0
        self.connect_failures = 0
        self.filled = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Flood:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(60)
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()

    def _open(self, target: tuple[str, int]) -> None:
        try:
            sock = self._client.connect(*target)
        except OSError:
            self.connect_failures += 1
            return
        sock.setblocking(False)
        self._selector.register(sock, selectors.EVENT_READ, target)
        self.opened += 1

    def _run(self) -> None:
        for target, count in self._targets.items():
            for _ in range(count):
                self._open(target)
        self.filled.set()
        while not self._stop.is_set():
            for key, _ in self._selector.select(0.2):
                sock: socket.socket = key.fileobj  # type: ignore[assignment]
                try:
                    if sock.recv(1):
                        continue
                except BlockingIOError:
                    continue
                except OSError:
                    pass
                self._selector.unregister(sock)
                sock.close()
                self.closed_by_server += 1
                self._open(key.data)


def proc_status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {name: value.strip() for name, _, value in (line.partition(":") for line in lines)}


def open_descriptors(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def soft_open_files_limit(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no open files limit")


@dataclass
class Running:
    process: subprocess.Popen[bytes]
    log: Path
    manifests: Path
    healthz: int
    metrics: int
    health_check: int

    def healthz_status(self) -> int:
        return http_get(LOCAL, "127.0.0.1", self.healthz, "/healthz").status

    def answers(self) -> bool:
        try:
            return self.healthz_status() == 200
        except OSError:
            return False

    def scrape(self) -> Metrics:
        return Metrics(http_get(LOCAL, "127.0.0.1", self.metrics, "/metrics").body)

    def add_service(self, index: int, pod: Pod) -> None:
        write(
            self.manifests / f"svc-{index}.yaml",
            [service(index), pointing_at(endpoint_slice(index), pod)],
        )

    def serves(self, index: int) -> bool:
        return f"-A -t {service_ip(index)}:80 -s rr" in sh("ipvsadm", "-Sn")

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def start(
    tmp_path: Path, node: Node, pod: Callable[[str], Pod]
) -> Iterator[Callable[[Limits], Running]]:
    """Start the daemon with the given limits on a folder of manifests: one LoadBalancer
    Service with externalTrafficPolicy Local (a health-check node port) and its endpoint."""
    manifests = tmp_path / "cluster"
    manifests.mkdir()
    started: list[Running] = []

    def begin(limits: Limits) -> Running:
        health_check = HEALTH_CHECK_NODE_PORT
        balanced = service(
            HEALTH_CHECKED,
            type="LoadBalancer",
            externalTrafficPolicy="Local",
            healthCheckNodePort=health_check,
            ports=[{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}],
        )
        endpoints = pointing_at(endpoint_slice(HEALTH_CHECKED), pod("web"))
        write(manifests / "node.yaml", [node_manifest(address=str(node.ipv4))])
        write(manifests / "balanced.yaml", [balanced, endpoints])
        healthz, metrics = free_port(), free_port()
        log = tmp_path / "daemon.log"
        command = [sys.executable, "-c", LIMITED_RUN, str(limits.soft), str(limits.hard)]
        command += ["--source", str(manifests), "--hostname-override", NODE]
        command += ["--healthz-bind-address", f"0.0.0.0:{healthz}"]
        command += ["--metrics-bind-address", f"127.0.0.1:{metrics}"]
        command += ["--ipvs-min-sync-period", "0s"]
        with log.open("wb") as output:
            process = subprocess.Popen(command, stderr=output, stdin=subprocess.DEVNULL)
        running = Running(process, log, manifests, healthz, metrics, health_check)
        started.append(running)
        return running

    yield begin
    for running in started:
        if running.process.poll() is None:
            running.process.kill()
            running.process.wait()
        # Shown with a failing test's captured output.
        print(running.log_text())
    subprocess.run([sys.executable, "-m", "ipvsproxy", "cleanup"], capture_output=True, check=False)


@pytest.fixture(autouse=True)
def _descriptors_for_the_attacker() -> Iterator[None]:
    """The test process opens thousands of sockets: its own limit, raised for the test alone."""
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (32768, max(32768, before[1])))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, before)


@pytest.mark.parametrize("limits", [SYSTEMD_DEFAULT, RAISED], ids=["1024-1024", "1024-16384"])
def test_an_idle_connection_flood_neither_stops_syncs_nor_health_nor_grows_the_daemon(
    start: Callable[[Limits], Running], node: Node, pod: Callable[[str], Pod], limits: Limits
) -> None:
    running = start(limits)
    pid = running.process.pid
    wait_until(
        lambda: running.answers() and running.serves(HEALTH_CHECKED),
        START_TIMEOUT,
        lambda: f"the daemon serves and syncs:\n{running.log_text()}",
    )
    assert soft_open_files_limit(pid) == limits.expected_soft
    rss_before = int(proc_status(pid)["VmRSS"].split()[0])
    attacker = Client(pod("attacker").namespace, timeout=10)
    web = pod("web-2")
    targets = {
        (str(node.ipv4), running.healthz): limits.flood,
        (str(node.ipv4), running.health_check): HEALTH_CHECK_FLOOD,
    }
    with Flood(attacker, targets) as flood:
        wait_until(flood.filled.is_set, APPLY_TIMEOUT, "the attacker opened its connections")
        during = [running.healthz_status() for _ in range(5)]
        health_check = http_get(LOCAL, "127.0.0.1", running.health_check, "/")
        running.add_service(20, web)
        wait_until(lambda: running.serves(20), APPLY_TIMEOUT, "a Service added during the flood")
        status = proc_status(pid)
        threads, rss = int(status["Threads"]), int(status["VmRSS"].split()[0])
        descriptors = open_descriptors(pid)
        metrics = running.scrape()
    print(
        f"flood of {limits.flood} + {HEALTH_CHECK_FLOOD} connections ({flood.opened} opened, "
        f"{flood.closed_by_server} closed by the daemon, {flood.connect_failures} failed): "
        f"daemon threads {threads}, descriptors {descriptors}, RSS {rss_before} -> {rss} kB"
    )
    assert during == [200] * 5
    assert health_check.status == 200
    assert '"localEndpoints": 1' in health_check.body
    assert threads <= MAX_THREADS
    assert descriptors <= limits.max_connections + 128
    assert rss - rss_before <= MAX_RSS_GROWTH_KB
    assert metrics.value("ipvsproxy_http_connections") <= limits.max_connections
    assert metrics.value("ipvsproxy_http_connections_dropped_total", reason="evicted") > 0

    # After: still serving and syncing, and nothing in the log says it suffered.
    assert running.healthz_status() == 200
    running.add_service(21, web)
    wait_until(lambda: running.serves(21), APPLY_TIMEOUT, "a Service added after the flood")
    log = running.log_text()
    assert "Traceback" not in log
    assert "Too many open files" not in log
    assert running.process.poll() is None
