"""``ipvsproxy run`` as a separate process: started, probed over HTTP, stopped, its log kept.

Every wait is bounded. A daemon that exits early, never answers /healthz, or does not exit on
SIGTERM fails the test with the tail of its log.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from ipvsproxy.cli import main
from tests.lab.netns import Client
from tests.lab.traffic import APPLY_TIMEOUT, HttpReply, http_get, wait_until

# A bound for a hung daemon, never a timer. Python imports the whole CLI across hostfs inside
# the lab, then lists and syncs: 5 to 25 s in our runs, but once over 120 s on a loaded CI host.
START_TIMEOUT = 300.0
STOP_TIMEOUT = 30.0
LAST_SYNC = "kubeproxy_sync_proxy_rules_last_timestamp_seconds"
# What the daemon logs for each operation the kernel refused.
KERNEL_REFUSED = "kernel refused: "
LOG_TAIL_LINES = 40


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def configured_ports(config: Path) -> tuple[int, int]:
    """The health and metrics ports a KubeProxyConfiguration file names."""
    document = yaml.safe_load(config.read_text())
    healthz, metrics = (
        int(str(document[field]).rsplit(":", 1)[1])
        for field in ("healthzBindAddress", "metricsBindAddress")
    )
    return healthz, metrics


class Metrics:
    """One scrape of /metrics."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.samples = [
            sample for family in text_string_to_metric_families(text) for sample in family.samples
        ]

    def value(self, name: str, **labels: str) -> float:
        """The sum of the samples called ``name`` whose labels include ``labels`` (0 if none)."""
        return sum(
            sample.value
            for sample in self.samples
            if sample.name == name and labels.items() <= sample.labels.items()
        )


class Daemon:
    """One ``ipvsproxy run`` at a time, pointed at a kubeconfig, as node ``node-a``."""

    def __init__(
        self, kubeconfig: Path | None, log_path: Path, *flags: str, config: Path | None = None
    ) -> None:
        """``config``: a KubeProxyConfiguration to run with (kube-proxy's own, for a
        takeover), whose kubeconfig, health and metrics addresses then apply."""
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        self.flags = flags
        self.config = config
        self.healthz_port = 0
        self.metrics_port = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._local = Client(None, timeout=5.0)
        # Log lines (by index) in which a kernel refusal is expected.
        self._tolerated: list[range] = []

    @property
    def process(self) -> subprocess.Popen[bytes]:
        assert self._process is not None, "the daemon was never started"
        return self._process

    def start(self, timeout: float = START_TIMEOUT) -> Daemon:
        """Start and wait until /healthz answers 200 and a first sync is done."""
        command = [sys.executable, "-m", "ipvsproxy", "run", "--hostname-override", "node-a"]
        if self.config is not None:
            self.healthz_port, self.metrics_port = configured_ports(self.config)
            command += ["--config", str(self.config)]
        else:
            assert self.kubeconfig is not None, "a daemon needs a kubeconfig or a config file"
            self.healthz_port, self.metrics_port = free_port(), free_port()
            command += [
                "--kubeconfig",
                str(self.kubeconfig),
                "--healthz-bind-address",
                f"127.0.0.1:{self.healthz_port}",
                "--metrics-bind-address",
                f"127.0.0.1:{self.metrics_port}",
            ]
        command += self.flags
        with self.log_path.open("ab") as log:
            log.write(f"=== {' '.join(command)}\n".encode())
            self._process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        wait_until(
            self._ready,
            timeout,
            lambda: f"the daemon answers /healthz 200 after a first sync:\n{self.log_tail()}",
        )
        return self

    def wait_synced_since(self, moment: float, timeout: float = APPLY_TIMEOUT) -> None:
        """Wait for a whole sync that began after ``moment`` (a ``time.time()``): the first to
        end after it may have begun before, the one that ends after that one cannot have.
        With nothing to change, that is up to one ``--ipvs-sync-period``."""
        self._sync_ending_after(self._sync_ending_after(moment, timeout), timeout)

    def _sync_ending_after(self, moment: float, timeout: float) -> float:
        def ended() -> float:
            last = self.metrics().value(LAST_SYNC)
            return last if last > moment else 0.0

        return wait_until(ended, timeout, f"a sync ends after {moment:.1f}")

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(
                f"the daemon exited with status {self.process.returncode}:\n{self.log_tail()}"
            )
        try:
            return self.healthz().status == 200 and self.metrics().value(LAST_SYNC) > 0
        except (OSError, ValueError):
            return False

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def healthz(self, path: str = "/healthz") -> HttpReply:
        return http_get(self._local, "127.0.0.1", self.healthz_port, path)

    def metrics(self) -> Metrics:
        reply = http_get(self._local, "127.0.0.1", self.metrics_port, "/metrics")
        if reply.status != 200:
            raise ValueError(f"/metrics answered {reply.status}")
        return Metrics(reply.body)

    def wait_for_metric(
        self, name: str, above: float, timeout: float = 30.0, **labels: str
    ) -> float:
        """Wait until the metric's value exceeds ``above``; returns the value."""
        return (
            wait_until(
                lambda: max(self.metrics().value(name, **labels) - above, 0),
                timeout,
                f"{name}{labels or ''} above {above}",
            )
            + above
        )

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        """Send ``sig`` and return the exit status (the daemon is killed if it does not exit)."""
        process = self.process
        if process.poll() is None:
            process.send_signal(sig)
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                raise AssertionError(
                    f"the daemon did not exit within {STOP_TIMEOUT:g} s of {sig.name}:\n"
                    f"{self.log_tail()}"
                ) from None
        return process.returncode

    @contextmanager
    def refusals_expected(self) -> Iterator[None]:
        """The test changes the kernel behind the daemon's back meanwhile: an op of a sync
        then running may be refused, which is no fault of the daemon's."""
        first = len(self.log().splitlines())
        try:
            yield
        finally:
            self._tolerated.append(range(first, len(self.log().splitlines())))

    def unexpected_refusals(self) -> list[str]:
        return [
            line
            for index, line in enumerate(self.log().splitlines())
            if KERNEL_REFUSED in line and not any(index in lines for lines in self._tolerated)
        ]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self) -> str:
        return "\n".join(self.log().splitlines()[-LOG_TAIL_LINES:])


def stop_and_check(daemon: Daemon) -> None:
    """SIGTERM must end the daemon with status 0, and the kernel must have refused it nothing
    meanwhile: a refused iptables restore leaves the traffic flowing on the old rules, so only
    the log tells."""
    status = daemon.stop(signal.SIGTERM)
    assert status == 0, f"the daemon exited with {status} on SIGTERM:\n{daemon.log_tail()}"
    refused = daemon.unexpected_refusals()
    assert refused == [], "\n".join(refused)


@contextmanager
def cleaned_up(daemon: Daemon) -> Iterator[Daemon]:
    """``daemon`` for the block, which starts it; after a block that went well it must pass
    ``stop_and_check``, and whatever happened it is killed if still running and ``cleanup``
    removes what it left in the kernel."""
    try:
        yield daemon
        stop_and_check(daemon)
    finally:
        if daemon.alive:
            daemon.process.kill()
            daemon.process.wait()
        cleaned = CliRunner().invoke(main, ["cleanup"])
        assert cleaned.exit_code == 0, cleaned.output
