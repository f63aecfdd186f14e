"""kube-proxy on node-a and ipvsproxy on node-b, under one profile: their nodes, the pods and
host servers that answer traffic, waiting for both to sync, and what differs between them."""

from __future__ import annotations

import os
import socketserver
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

from ipvsproxy.kernel.iptables.backend import detect_backend
from tests.differential.capture import capture
from tests.differential.cluster import Cluster, write_marker
from tests.differential.normalise import Difference, compare, normalise
from tests.differential.proxies import (
    Profile,
    Proxy,
    iptables_path,
    ipvsproxy,
    kube_proxy,
    write_config,
)
from tests.differential.topology import (
    HOST_PORT,
    NODE_A,
    NODE_B,
    POD_PORT,
    PODS_PER_NODE,
    SWAP,
    set_up_node,
    tear_down_node,
)
from tests.differential.traffic import Probe, verdict
from tests.differential.waiting import KernelProbe, wait_synced
from tests.lab.netns import inside, serve_names, stop_servers

# kube-proxy 1.37 adds its topology handler to a node informer that is already running, and
# registers the proxier on it only afterwards: when the informer replays the node first, the
# zone reaches no one, and every later event with the same labels is skipped as unchanged. It
# then ignores every topology hint until the node's zone changes. A start that lost that race
# is not the reference we compare with, so it is made again.
TOPOLOGY_HANDLED = '"Calling handler.OnTopologyChange"'
KUBE_PROXY_STARTS = 3


def iptables_flavour() -> str:
    """The flavour ours picks in a fresh node (the same kernel's modules everywhere)."""
    set_up_node(NODE_B)
    try:
        with inside(NODE_B.namespace):
            return detect_backend()
    finally:
        tear_down_node(NODE_B)


class Pair:
    def __init__(
        self, profile: Profile, binaries: Path, kubeconfig: Path, flavour: str, work: Path
    ) -> None:
        """``work``: a folder for the configuration files and both proxies' logs."""
        self.profile = profile
        self.flavour = flavour
        work.mkdir(parents=True, exist_ok=True)
        self.kube_proxy = kube_proxy(
            binaries / "kube-proxy",
            write_config(profile, NODE_A, kubeconfig, work),
            NODE_A,
            work / "kube-proxy.log",
        )
        self.ours = ipvsproxy(
            write_config(profile, NODE_B, kubeconfig, work), NODE_B, work / "ipvsproxy.log"
        )
        path = iptables_path(work / f"iptables-{flavour}", flavour)
        self._kube_proxy_env = {"PATH": f"{path}:{os.environ['PATH']}"}
        self._probes: list[KernelProbe] = []
        self._servers: list[socketserver.BaseServer] = []

    @property
    def proxies(self) -> tuple[Proxy, Proxy]:
        return self.kube_proxy, self.ours

    def start(self) -> None:
        for node in (NODE_A, NODE_B):
            set_up_node(node)
            with inside(node.namespace):
                for line in self.profile.foreign_virtual_servers:
                    subprocess.run(["ipvsadm", *line.split()], check=True)
            self._servers += serve_names(f"host-{node.name[-1]}", HOST_PORT, node.namespace)
            for number in range(1, PODS_PER_NODE + 1):
                name = node.pod_name(number)
                self._servers += serve_names(name, POD_PORT, node.pod_namespace(number))
        self.kube_proxy.start(self._kube_proxy_env)
        self.ours.start()
        self._probes = [KernelProbe(NODE_A.namespace), KernelProbe(NODE_B.namespace)]

    def stop(self) -> None:
        stop_servers(self._servers)
        for probe in self._probes:
            probe.close()
        for proxy in self.proxies:
            proxy.stop()
        for node in (NODE_A, NODE_B):
            tear_down_node(node)

    def wait_started(self, cluster: Cluster) -> str:
        """Until both proxies have synced, kube-proxy started again while it lost its node's
        zone to the start-up race above; how long each took."""
        for start in range(1, KUBE_PROXY_STARTS + 1):
            if start > 1:
                self.kube_proxy.stop()
                self.kube_proxy.start(self._kube_proxy_env)
            took = self.wait(cluster)
            if TOPOLOGY_HANDLED in self.kube_proxy.log():
                return took if start == 1 else f"{took} (kube-proxy started {start} times)"
        raise RuntimeError(
            f"kube-proxy did not learn its node's zone in {KUBE_PROXY_STARTS} starts"
        )

    def wait(self, cluster: Cluster) -> str:
        """Until both proxies have synced what was written so far; how long each took."""
        started = time.monotonic()
        marker = write_marker(cluster)
        took = [
            f"{proxy.name} {wait_synced(proxy, probe, marker) - started:.1f} s"
            for proxy, probe in zip(self.proxies, self._probes, strict=True)
        ]
        return ", ".join(took)

    def differences(self) -> list[Difference]:
        theirs = normalise(capture(NODE_A.namespace, self.flavour))
        ours = normalise(capture(NODE_B.namespace, self.flavour), SWAP.address)
        return compare(theirs, ours)

    def traffic(self, cluster: Cluster, probes: Iterable[Probe]) -> list[Difference]:
        """Each probe's verdict on kube-proxy's node and on ours, where they differ."""
        found = []
        for probe in probes:
            theirs, ours = (verdict(cluster, node, probe) for node in (NODE_A, NODE_B))
            if theirs != ours:
                subject = f"{probe.name} ({probe.service})"
                found.append(Difference("traffic", subject, theirs, ours))
        return found
