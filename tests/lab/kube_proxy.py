"""The real kube-proxy in IPVS mode, run in the lab as a node runs it.

kube-proxy calls ``iptables``, ``iptables-save`` and ``iptables-restore`` by name and writes
whatever flavour they are (its image's iptables-wrapper picks one). The lab kernel can write
the nat table through one flavour only, which varies by boot, so a folder of links to the one
``detect_backend`` finds goes first on kube-proxy's PATH: kube-proxy and ipvsproxy then share a
backend, as they do on a node. Every wait is bounded; a kube-proxy that exits early fails the
test with the tail of its log.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.lab.daemon import Metrics, configured_ports
from tests.lab.netns import Client
from tests.lab.traffic import http_get, wait_until

# A bound for a hung kube-proxy, never a timer: Go starts slowly inside UML (seconds), and
# its first sync starts one `ipset add` process per entry, 2,000 at 1,000 Services, each
# 0.1 s inside a lab on a loaded host.
START_TIMEOUT = 900.0
STOP_TIMEOUT = 30.0
LAST_SYNC = "kubeproxy_sync_proxy_rules_last_timestamp_seconds"
LOG_TAIL_BYTES = 6000


@dataclass(frozen=True)
class KubeProxySettings:
    """What the KubeProxyConfiguration file says, with the lab node's values."""

    kubeconfig: Path
    hostname: str = "node-a"
    cluster_cidr: str = "10.244.0.0/16"
    healthz: str = "127.0.0.1:10256"
    metrics: str = "127.0.0.1:10249"

    def document(self) -> dict[str, object]:
        return {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "mode": "ipvs",
            "clientConnection": {"kubeconfig": str(self.kubeconfig)},
            "hostnameOverride": self.hostname,
            "clusterCIDR": self.cluster_cidr,
            "healthzBindAddress": self.healthz,
            "metricsBindAddress": self.metrics,
            # Left as the kernel has them: a lab kernel is no node to tune.
            "conntrack": {
                "maxPerCore": 0,
                "min": 0,
                "tcpEstablishedTimeout": "0s",
                "tcpCloseWaitTimeout": "0s",
            },
            "ipvs": {"scheduler": "rr", "syncPeriod": "30s"},
        }


def iptables_links(folder: Path, backend: str) -> Path:
    """``iptables``, ``ip6tables`` and their -save/-restore, linked to one backend's binaries."""
    folder.mkdir(parents=True, exist_ok=True)
    for family in ("iptables", "ip6tables"):
        for suffix in ("", "-save", "-restore"):
            link = folder / f"{family}{suffix}"
            link.unlink(missing_ok=True)
            link.symlink_to(f"/usr/sbin/{family}-{backend}{suffix}")
    return folder


class KubeProxy:
    """One kube-proxy at a time, from ``binaries``, with its files in ``folder``."""

    def __init__(
        self, binaries: Path, folder: Path, settings: KubeProxySettings, backend: str
    ) -> None:
        self.binary = binaries / "kube-proxy"
        self.folder = folder
        self.config = folder / "kube-proxy.yaml"
        self.log_path = folder / "kube-proxy.log"
        self._path = iptables_links(folder / "bin", backend)
        folder.mkdir(parents=True, exist_ok=True)
        self.config.write_text(yaml.safe_dump(settings.document()))
        _, self.metrics_port = configured_ports(self.config)
        self._process: subprocess.Popen[bytes] | None = None
        self._local = Client(None, timeout=5.0)

    def start(self, *flags: str) -> KubeProxy:
        """Start kube-proxy; it syncs once its informers have listed everything."""
        command = [str(self.binary), f"--config={self.config}", *flags]
        env = {**os.environ, "PATH": f"{self._path}:{os.environ.get('PATH', '')}"}
        with self.log_path.open("ab") as log:
            log.write(f"=== {' '.join(command)}\n".encode())
            self._process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
            )
        return self

    def wait_first_sync(self, timeout: float = START_TIMEOUT) -> float:
        """Wait for kube-proxy's first completed IPv4 sync; its time (``time.time()``)."""
        return wait_until(
            self._last_sync,
            timeout,
            lambda: f"kube-proxy completes a sync:\n{self.log_tail()}",
        )

    def _last_sync(self) -> float:
        process = self._process
        assert process is not None, "kube-proxy was never started"
        if process.poll() is not None:
            raise AssertionError(
                f"kube-proxy exited with status {process.returncode}:\n{self.log_tail()}"
            )
        try:
            return self.metrics().value(LAST_SYNC, ip_family="IPv4")
        except (OSError, ValueError):
            return 0.0

    def metrics(self) -> Metrics:
        reply = http_get(self._local, "127.0.0.1", self.metrics_port, "/metrics")
        if reply.status != 200:
            raise ValueError(f"/metrics answered {reply.status}")
        return Metrics(reply.body)

    def stop(self) -> float:
        """SIGTERM, as the kubelet stops a pod; the moment kube-proxy was gone (``time.time()``).
        kube-proxy leaves the kernel's state in place, and dies of the signal."""
        process = self._process
        assert process is not None, "kube-proxy was never started"
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise AssertionError(f"kube-proxy outlived SIGTERM:\n{self.log_tail()}") from None
        gone = time.time()
        assert process.returncode in (0, -signal.SIGTERM), self.log_tail()
        return gone

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def kill(self) -> None:
        if self._process is not None and self.alive:
            self._process.kill()
            self._process.wait()

    def log_tail(self) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        return data[-LOG_TAIL_BYTES:].decode(errors="replace")
