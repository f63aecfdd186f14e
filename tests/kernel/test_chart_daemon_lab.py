"""`ipvsproxy run` as the chart's DaemonSet runs it: its command, args, env and config file.

The chart is rendered with apiServer pointing at a fake API server on the lab's loopback, so
the proxy reaches it through the kubeconfig the chart writes, with the service account token
where the kubelet puts it (the lab's own /run, a tmpfs). The ConfigMap's files go to a
temporary folder standing in for their mount path; every mention of that path (args, files)
is moved with them. Then the ports the chart's probes name are asked, as the kubelet would.
Needs the daemon (`ipvsproxy run`, /work/run-spec.md).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.fake_apiserver import TOKEN, FakeApiServer
from tests.chart.chart_kit import config_files, proxy_container, render
from tests.lab.netns import sh

NODE = "node-lab"
SERVICE_IP = "10.96.0.80"
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
READY_WITHIN = 120.0  # seconds; Python starts slowly in UML (every file read crosses hostfs)


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        server.apply(
            {
                "kind": "Node",
                "metadata": {"name": NODE},
                "status": {"addresses": [{"type": "InternalIP", "address": "192.0.2.1"}]},
            }
        )
        server.apply(
            {
                "kind": "Service",
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {
                    "type": "ClusterIP",
                    "clusterIP": SERVICE_IP,
                    "clusterIPs": [SERVICE_IP],
                    "ipFamilies": ["IPv4"],
                    "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}],
                },
            }
        )
        server.apply({"kind": "EndpointSlice",
                      "metadata": {"name": "web-1", "namespace": "default",
                                   "labels": {"kubernetes.io/service-name": "web"}},
                      "addressType": "IPv4",
                      "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                      "endpoints": [{"addresses": ["10.244.0.20"], "nodeName": NODE,
                                     "conditions": {"ready": True, "serving": True,
                                                    "terminating": False}}]})  # fmt: skip
        yield server


@pytest.fixture
def service_account_token() -> Iterator[None]:
    """The kubelet's token and CA files, in the lab's /run tmpfs (never this machine's)."""
    mounts = Path("/proc/mounts").read_text().split("\n")
    assert any(line.split()[1:3] == ["/run", "tmpfs"] for line in mounts if line), (
        "/run is no tmpfs"
    )
    assert SERVICE_ACCOUNT.resolve().is_relative_to("/run")
    SERVICE_ACCOUNT.mkdir(parents=True, exist_ok=True)
    (SERVICE_ACCOUNT / "token").write_text(TOKEN)
    (SERVICE_ACCOUNT / "ca.crt").write_text("")
    yield
    for name in ("token", "ca.crt"):
        (SERVICE_ACCOUNT / name).unlink()


def _as_the_kubelet_starts_it(
    container: dict[str, Any], files: dict[str, str], config_dir: Path
) -> tuple[list[str], dict[str, str]]:
    """The container's command line and environment, its ConfigMap files written to config_dir."""
    (mount,) = (m for m in container["volumeMounts"] if m["name"] == "config")
    mount_path = mount["mountPath"]
    for name, text in files.items():
        (config_dir / name).write_text(text.replace(mount_path, str(config_dir)))
    (command, *rest) = container["command"]
    args = [arg.replace(mount_path, str(config_dir)) for arg in container["args"]]
    env = {"PATH": os.environ["PATH"]}
    for variable in container["env"]:
        if "valueFrom" in variable:
            assert variable["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
            env[variable["name"]] = NODE
        else:
            env[variable["name"]] = variable["value"]
    # The image's console script; here, the one installed beside this interpreter.
    return [str(Path(sys.executable).parent / command), *rest, *args], env


def _port(container: dict[str, Any], name: str) -> int:
    (port,) = (p["containerPort"] for p in container["ports"] if p["name"] == name)
    assert isinstance(port, int)
    return port


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _wait_for(condition: Callable[[], bool], log: Path) -> None:
    deadline = time.monotonic() + READY_WITHIN
    while not condition():
        assert time.monotonic() < deadline, f"not reached; the proxy's log:\n{log.read_text()}"
        time.sleep(1)


def _probe(
    container: dict[str, Any], probe: str, proxy: subprocess.Popen[str], log: Path
) -> dict[str, Any]:
    """Ask the probe's path and port until it answers 200, as the kubelet's retries would."""
    get = container[probe]["httpGet"]
    host = get.get("host", "127.0.0.1")  # hostNetwork: the pod's IP is the node's
    port = _port(container, get["port"]) if isinstance(get["port"], str) else get["port"]
    url = f"http://{host}:{port}{get['path']}"
    deadline = time.monotonic() + READY_WITHIN
    answer = (0, "")
    while time.monotonic() < deadline and proxy.poll() is None:
        try:
            answer = _get(url)
        except OSError:
            answer = (0, "")
        if answer[0] == 200:
            body: dict[str, Any] = json.loads(answer[1])
            return body
        time.sleep(1)
    raise AssertionError(f"{url}: {answer}; proxy exit {proxy.poll()}; its log:\n{log.read_text()}")


def test_the_chart_s_daemon_container_serves_its_probes(
    apiserver: FakeApiServer, service_account_token: None, tmp_path: Path
) -> None:
    objects = render({"apiServer": apiserver.url, "metrics": {"bindAddress": "0.0.0.0"}})
    container = proxy_container(objects)
    command_line, env = _as_the_kubelet_starts_it(container, config_files(objects), tmp_path)
    log_path = tmp_path / "proxy.log"
    log = log_path.open("w")
    proxy = subprocess.Popen(command_line, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        # kube-proxy's bodies: /livez the times, /healthz also whether the node takes traffic.
        alive = _probe(container, "livenessProbe", proxy, log_path)
        assert {"lastUpdated", "currentTime"} <= alive.keys()
        ready = _probe(container, "readinessProbe", proxy, log_path)
        assert ready["nodeEligible"] is True
        # It reached the API server through the chart's kubeconfig: the service is in the kernel.
        _wait_for(lambda: f"TCP  {SERVICE_IP}:80 rr" in sh("ipvsadm", "-Ln"), log_path)
        status, metrics = _get(f"http://127.0.0.1:{_port(container, 'metrics')}/metrics")
        assert status == 200
        assert "kubeproxy_sync_proxy_rules_last_timestamp_seconds" in metrics
        proxy.send_signal(signal.SIGTERM)
        assert proxy.wait(timeout=60) == 0
    finally:
        if proxy.poll() is None:
            proxy.kill()
            proxy.wait()
        log.close()
        subprocess.run([sys.executable, "-m", "ipvsproxy", "cleanup"], check=False)
