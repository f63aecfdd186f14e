"""externalTrafficPolicy: Local with every endpoint on another node, on the real kernel.

As kube-proxy's IPVS mode (kubernetes #97081), a pod on this node still reaches the service
through its NodePort and external IP: those virtual servers get the cluster-wide endpoints.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from ipvsproxy.kernel.sysctl import ProcSysctl
from tests.lab.netns import Client, Node, Pod

EXTERNAL_IP = "198.51.100.7"
NODE_PORT = 30777


def _objects(node_ip: str, remote: list[Pod]) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "node-a"},
            "status": {"addresses": [{"type": "InternalIP", "address": node_ip}]},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "local-web", "namespace": "default"},
            "spec": {
                "type": "NodePort",
                "clusterIP": "10.96.77.1",
                "externalIPs": [EXTERNAL_IP],
                "externalTrafficPolicy": "Local",
                "ports": [{"name": "http", "port": 80, "targetPort": 8080, "nodePort": NODE_PORT}],
            },
        },
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": "local-web-1",
                "namespace": "default",
                "labels": {"kubernetes.io/service-name": "local-web"},
            },
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            # Every endpoint claims another node: none is local to node-a.
            "endpoints": [{"addresses": [str(pod.ipv4)], "nodeName": "node-b"} for pod in remote],
        },
    ]


def _ipvsproxy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ipvsproxy", *args], capture_output=True, text=True, check=False
    )


def test_local_pod_reaches_local_policy_service_without_local_endpoints(
    node: Node,
    pod: Callable[[str], Pod],
    client: Callable[[Pod | None], Client],
    tmp_path: Path,
    module_loader: ProcSysctl,
) -> None:
    """module_loader: the external-IP rules need xt_physdev, which iptables loads on demand."""
    remote = [pod("remote-a"), pod("remote-b")]
    caller = client(node.add_pod("caller"))
    manifest = tmp_path / "cluster.yaml"
    items = _objects(str(node.ipv4), remote)
    manifest.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    try:
        done = _ipvsproxy(
            "sync", "--once", "--source", str(manifest), "--hostname-override", "node-a"
        )
        assert done.returncode == 0, done.stdout + done.stderr
        expected = {"remote-a", "remote-b"}
        assert set(caller.tcp_names(str(node.ipv4), NODE_PORT, 20)) == expected
        assert set(caller.tcp_names(EXTERNAL_IP, 80, 20)) == expected
    finally:
        _ipvsproxy("cleanup")
