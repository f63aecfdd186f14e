"""The two proxies under comparison, each in its node's namespace, with the same configuration.

A ``Profile`` is one KubeProxyConfiguration: both proxies read the same file, apart from the
node's name. The real kube-proxy runs with its iptables commands pointed at the flavour
(legacy or nft) ours chose on this kernel, so both write the same tables.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from tests.differential.topology import NodeLayout
from tests.lab.netns import inside

METRICS_ADDRESS = "127.0.0.1:10249"
STOP_TIMEOUT = 30.0
# Between the end of a sync and the start of the next: longer than the harness takes to
# compare the kernels and write the next batch, so that each batch is one sync per family.
# (A kube-proxy sync costs many seconds in the lab, nearly all of it whatever changed.)
MIN_SYNC_PERIOD = "10s"
LOG_TAIL_CHARACTERS = 6000
IPTABLES_TOOLS = ("iptables", "ip6tables")
IPTABLES_SUFFIXES = ("", "-save", "-restore")


@dataclass(frozen=True)
class Profile:
    """One configuration both proxies run with; each field is kube-proxy's, in its file."""

    name: str
    cluster_cidr: str = "10.244.0.0/16,fd00:10:244::/56"
    detect_local_mode: str = "ClusterCIDR"
    bridge_interface: str = ""
    interface_name_prefix: str = ""
    masquerade_all: bool = False
    strict_arp: bool = False
    exclude_cidrs: tuple[str, ...] = ()
    nodeport_addresses: tuple[str, ...] = ()
    scheduler: str = "rr"
    tcp_timeout: str = "0s"
    tcp_fin_timeout: str = "0s"
    udp_timeout: str = "0s"
    # Virtual servers someone else made before the proxies start (--ipvs-exclude-cidrs).
    foreign_virtual_servers: tuple[str, ...] = field(default=())
    # The scenario phases run under it, one round each (every scenario's, in lockstep).
    rounds: tuple[str, ...] = ("add", "modify", "scale", "delete")

    def config(self, node: NodeLayout, kubeconfig: Path) -> dict[str, Any]:
        detect_local: dict[str, str] = {}
        if self.bridge_interface:
            detect_local["bridgeInterface"] = self.bridge_interface
        if self.interface_name_prefix:
            detect_local["interfaceNamePrefix"] = self.interface_name_prefix
        return {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "mode": "ipvs",
            "hostnameOverride": node.name,
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "clusterCIDR": self.cluster_cidr,
            "detectLocalMode": self.detect_local_mode,
            "detectLocal": detect_local,
            "nodePortAddresses": list(self.nodeport_addresses),
            "metricsBindAddress": METRICS_ADDRESS,
            "healthzBindAddress": "0.0.0.0:10256",
            "iptables": {"masqueradeAll": self.masquerade_all, "masqueradeBit": 14},
            "ipvs": {
                "scheduler": self.scheduler,
                "strictARP": self.strict_arp,
                "excludeCIDRs": list(self.exclude_cidrs),
                "syncPeriod": "1h",
                "minSyncPeriod": MIN_SYNC_PERIOD,
                "tcpTimeout": self.tcp_timeout,
                "tcpFinTimeout": self.tcp_fin_timeout,
                "udpTimeout": self.udp_timeout,
            },
            # The conntrack table is the machine's, not the node's: neither proxy touches it.
            "conntrack": {
                "maxPerCore": 0,
                "min": 0,
                "tcpEstablishedTimeout": "0s",
                "tcpCloseWaitTimeout": "0s",
            },
        }


def iptables_path(folder: Path, flavour: str) -> Path:
    """A folder whose iptables commands are the ``flavour`` ones, to put first on PATH."""
    folder.mkdir(parents=True, exist_ok=True)
    for tool in IPTABLES_TOOLS:
        for suffix in IPTABLES_SUFFIXES:
            link = folder / f"{tool}{suffix}"
            if not link.exists():
                link.symlink_to(f"/usr/sbin/{tool}-{flavour}{suffix}")
    return folder


@dataclass(frozen=True)
class SyncCounting:
    """How a proxy's syncs are counted: each start by a log line, each end by a metric.

    A sync's effects are in the kernel only once it has ended; with a line per start and a
    count of ends, "every sync begun before now has ended" can be told without a timer.
    """

    # family -> the text of a log line that starts a sync of that family
    starts: dict[str, str]
    # family -> (metric sample, labels) counting the syncs that ended
    ends: dict[str, tuple[str, dict[str, str]]]


KUBE_PROXY_COUNTING = SyncCounting(
    starts={f: f'"Syncing ipvs proxier rules" ipFamily="{f}"' for f in ("IPv4", "IPv6")},
    ends={
        f: ("kubeproxy_sync_proxy_rules_duration_seconds_count", {"ip_family": f})
        for f in ("IPv4", "IPv6")
    },
)
IPVSPROXY_COUNTING = SyncCounting(
    starts={"both": " debug syncing"}, ends={"both": ("ipvsproxy_syncs_total", {})}
)


class Proxy:
    """One proxy process in a node's namespace, its log in a file."""

    def __init__(
        self,
        name: str,
        node: NodeLayout,
        command: list[str],
        log_path: Path,
        counting: SyncCounting,
    ) -> None:
        self.name = name
        self.node = node
        self.command = ["ip", "netns", "exec", node.namespace, *command]
        self.log_path = log_path
        self.counting = counting
        self._process: subprocess.Popen[bytes] | None = None
        self._log_start = 0

    def start(self, env: dict[str, str] | None = None) -> None:
        with self.log_path.open("ab") as log:
            log.write(f"=== {' '.join(self.command)}\n".encode())
            self._log_start = log.tell()
            self._process = subprocess.Popen(
                self.command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )

    def check_alive(self) -> None:
        if self._process is not None and self._process.poll() is not None:
            raise RuntimeError(
                f"{self.name} exited with status {self._process.returncode}:\n{self.log_tail()}"
            )

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self) -> None:
        if self._process is None or self._process.poll() is not None:
            return
        self._process.send_signal(signal.SIGTERM)
        try:
            self._process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()

    def log(self) -> str:
        """This run's log."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._log_start)
                return log.read().decode(errors="replace")
        except OSError:
            return ""

    def log_tail(self) -> str:
        return self.log()[-LOG_TAIL_CHARACTERS:]

    def metrics(self) -> list[Sample]:
        with inside(self.node.namespace):
            try:
                with urllib.request.urlopen(f"http://{METRICS_ADDRESS}/metrics", timeout=5) as r:
                    text = r.read().decode()
            except OSError:
                return []
        return [
            sample for family in text_string_to_metric_families(text) for sample in family.samples
        ]

    def syncs_begun(self) -> dict[str, int]:
        """Per family, the syncs that have begun so far (by the log)."""
        text = self.log()
        return {family: text.count(line) for family, line in self.counting.starts.items()}

    def syncs_ended(self) -> dict[str, int]:
        samples = self.metrics()
        return {
            family: int(
                sum(
                    s.value
                    for s in samples
                    if s.name == name and labels.items() <= s.labels.items()
                )
            )
            for family, (name, labels) in self.counting.ends.items()
        }


def write_config(profile: Profile, node: NodeLayout, kubeconfig: Path, folder: Path) -> Path:
    path = folder / f"{profile.name}-{node.name}.yaml"
    # JSON is YAML: both proxies read it as their KubeProxyConfiguration.
    path.write_text(json.dumps(profile.config(node, kubeconfig), indent=2))
    return path


def kube_proxy(binary: Path, config: Path, node: NodeLayout, log_path: Path) -> Proxy:
    # config.go at 4 logs the topology handler's calls: whether it learnt its node's zone.
    command = [str(binary), f"--config={config}", "--v=3", "--vmodule=config=4"]
    return Proxy("kube-proxy", node, command, log_path, KUBE_PROXY_COUNTING)


def ipvsproxy(config: Path, node: NodeLayout, log_path: Path) -> Proxy:
    command = [sys.executable, "-m", "ipvsproxy", "run", f"--config={config}", "-v", "4"]
    return Proxy("ipvsproxy", node, command, log_path, IPVSPROXY_COUNTING)
