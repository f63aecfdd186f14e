"""`ipvsproxy run --source DIR` on the lab kernel: health, a manifest added while it runs,
real traffic through the result, and SIGTERM leaving the table in place."""

from __future__ import annotations

import json
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
import yaml

from tests.daemon_kit import NODE, endpoint_slice, service
from tests.daemon_kit import node as node_manifest
from tests.lab.netns import Client, Node, Pod, sh

HEALTHZ_PORT = 10256
METRICS_PORT = 10249
# A Python process starts slowly inside the lab: the first answer may take a while.
START_PATIENCE = 120.0
PATIENCE = 30.0


def get(port: int, path: str) -> tuple[int, str] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError:
        return None


def wait_for(predicate: Callable[[], bool], patience: float) -> float:
    """Seconds until ``predicate`` held; fails the test if it never does."""
    started = time.monotonic()
    while not predicate():
        assert time.monotonic() - started < patience, "gave up waiting"
        time.sleep(0.1)
    return time.monotonic() - started


def ipvs_table() -> str:
    return sh("ipvsadm", "-Sn")


def write(path: Path, objects: list[dict[str, Any]]) -> None:
    # Written beside and renamed, so the daemon never reads half a file.
    partial = path.with_suffix(".part")
    partial.write_text(yaml.safe_dump_all(objects))
    partial.rename(path)


def pointing_at(slice_: dict[str, Any], pod: Pod) -> dict[str, Any]:
    slice_["endpoints"] = [
        {"addresses": [str(pod.ipv4)], "conditions": {"ready": True}, "nodeName": NODE}
    ]
    return slice_


@pytest.fixture
def manifests(tmp_path: Path, node: Node) -> Path:
    folder = tmp_path / "cluster"
    folder.mkdir()
    write(folder / "node.yaml", [node_manifest(address=str(node.ipv4))])
    return folder


@pytest.fixture
def start_daemon(manifests: Path, tmp_path: Path) -> Iterator[Callable[[], subprocess.Popen[str]]]:
    log = tmp_path / "daemon.log"
    started: list[subprocess.Popen[str]] = []

    def start() -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ipvsproxy",
                "run",
                "--source",
                str(manifests),
                "--hostname-override",
                NODE,
                "--healthz-bind-address",
                f"127.0.0.1:{HEALTHZ_PORT}",
                "--metrics-bind-address",
                f"127.0.0.1:{METRICS_PORT}",
                "--ipvs-min-sync-period",
                "0s",
                "--logging-format",
                "json",
            ],
            stderr=log.open("w"),
            text=True,
        )
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()
    # Shown with a failing test's captured output.
    print(log.read_text())
    subprocess.run([sys.executable, "-m", "ipvsproxy", "cleanup"], capture_output=True, check=False)


def test_run_serves_health_follows_the_folder_and_leaves_the_table_on_sigterm(
    tmp_path: Path,
    manifests: Path,
    start_daemon: Callable[[], subprocess.Popen[str]],
    pod: Callable[[str], Pod],
    client: Callable[[Pod | None], Client],
) -> None:
    web = pod("web")
    write(manifests / "one.yaml", [service(1), pointing_at(endpoint_slice(1), web)])
    daemon = start_daemon()

    wait_for(lambda: "-A -t 10.96.0.2:80 -s rr" in ipvs_table(), START_PATIENCE)
    healthz = get(HEALTHZ_PORT, "/healthz")
    assert healthz is not None and healthz[0] == 200
    assert json.loads(healthz[1])["nodeEligible"] is True
    assert (get(HEALTHZ_PORT, "/livez") or (0, ""))[0] == 200
    assert client(None).tcp_names("10.96.0.2", 80, 3) == {"web": 3}

    write(manifests / "two.yaml", [service(2), pointing_at(endpoint_slice(2), web)])
    seconds = wait_for(lambda: "-A -t 10.96.0.3:80 -s rr" in ipvs_table(), PATIENCE)
    print(f"a manifest added to the folder reached the kernel in {seconds:.2f} s")
    assert client(None).tcp_names("10.96.0.3", 80, 3) == {"web": 3}
    # The per-service traffic comes from the kernel's own counters, which IPVS's estimator
    # folds in every two seconds: our three connections, once it has.
    traffic = (
        "ipvsproxy_service_connections_total"
        '{namespace="default",port="http",protocol="TCP",service="svc-1"} '
    )

    def connections() -> float:
        text = (get(METRICS_PORT, "/metrics") or (0, ""))[1]
        found = [line for line in text.splitlines() if line.startswith(traffic)]
        return float(found[0].removeprefix(traffic)) if found else -1.0

    wait_for(lambda: connections() >= 3, PATIENCE)
    metrics = get(METRICS_PORT, "/metrics")
    assert metrics is not None
    assert 'ipvsproxy_syncs_total{mode="incremental",result="ok"}' in metrics[1]
    checked = subprocess.run(
        ["promtool", "check", "metrics"],
        input=metrics[1],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr

    before = ipvs_table()
    daemon.send_signal(signal.SIGTERM)
    daemon.wait(timeout=PATIENCE)
    stderr = (tmp_path / "daemon.log").read_text()
    assert daemon.returncode == 0, stderr
    assert ipvs_table() == before
    assert "10.96.0.3" in sh("ip", "-o", "addr", "show", "dev", "kube-ipvs0")
    lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    assert any(line["msg"] == "synced" and line["mode"] == "incremental" for line in lines)
