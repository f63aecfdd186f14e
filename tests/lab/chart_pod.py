"""The chart's pod inside the lab, as the kubelet and the container runtime would run it.

The chart is rendered with apiServer pointing at a fake API server on the lab's loopback, so
the proxy reaches it through the kubeconfig the chart writes, with the service account token
where the kubelet puts it (the lab's own /run, a tmpfs). The ConfigMap's files go to a
temporary folder standing in for their mount path; every mention of that path (args, files)
is moved with them. ``in_its_sandbox`` applies a container's securityContext as runc does
for what the proxy depends on: a container that is not privileged sees /proc/sys read-only
and holds only the capabilities it adds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.api.fake_apiserver import TOKEN, FakeApiServer

NODE = "node-lab"
SERVICE_IP = "10.96.0.80"
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
READY_WITHIN = 120.0  # seconds; Python starts slowly in UML (every file read crosses hostfs)


def seed(server: FakeApiServer) -> None:
    """The node the proxy runs on, and one Service with one ready endpoint on it."""
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


@contextmanager
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


def as_the_kubelet_starts_it(
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


def port_of(container: dict[str, Any], name: str) -> int:
    (port,) = (p["containerPort"] for p in container["ports"] if p["name"] == name)
    assert isinstance(port, int)
    return port


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def wait_for(condition: Callable[[], bool], log: Path) -> None:
    deadline = time.monotonic() + READY_WITHIN
    while not condition():
        assert time.monotonic() < deadline, f"not reached; the proxy's log:\n{log.read_text()}"
        time.sleep(1)


def probe(
    container: dict[str, Any], kind: str, proxy: subprocess.Popen[str], log: Path
) -> dict[str, Any]:
    """Ask the probe's path and port until it answers 200, as the kubelet's retries would."""
    action = container[kind]["httpGet"]
    host = action.get("host", "127.0.0.1")  # hostNetwork: the pod's IP is the node's
    port = port_of(container, action["port"]) if isinstance(action["port"], str) else action["port"]
    url = f"http://{host}:{port}{action['path']}"
    deadline = time.monotonic() + READY_WITHIN
    answer = (0, "")
    while time.monotonic() < deadline and proxy.poll() is None:
        try:
            answer = get(url)
        except OSError:
            answer = (0, "")
        if answer[0] == 200:
            body: dict[str, Any] = json.loads(answer[1])
            return body
        time.sleep(1)
    raise AssertionError(f"{url}: {answer}; proxy exit {proxy.poll()}; its log:\n{log.read_text()}")


# In a mount namespace of its own, /proc/sys made read-only as runc's readonlyPaths make it.
_READ_ONLY_PROC_SYS = 'mount --bind -o ro /proc/sys /proc/sys && exec "$@"'


def in_its_sandbox(command_line: list[str], security_context: dict[str, Any]) -> list[str]:
    """``command_line`` as the container runtime starts it under ``security_context``: as it
    is when privileged; else with /proc/sys read-only and no capability but those added."""
    if security_context.get("privileged"):
        return command_line
    capabilities = security_context["capabilities"]
    assert capabilities["drop"] == ["ALL"]
    kept = ",".join(f"+{name.lower()}" for name in capabilities["add"])
    return [
        "unshare", "--mount", "--propagation", "private", "--",
        "sh", "-c", _READ_ONLY_PROC_SYS, "sh",
        "setpriv", f"--bounding-set=-all,{kept}", "--", *command_line,
    ]  # fmt: skip
