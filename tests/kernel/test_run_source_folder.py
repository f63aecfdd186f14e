"""`ipvsproxy run --source DIR` on the lab kernel, with the folder treated as a careless operator
or a hostile neighbour would: a FIFO dropped in, a file past the size bound, the folder deleted
and re-created one file at a time, most of it deleted for real."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon_kit import NODE, node, service
from tests.lab.netns import Node, sh

SERVICES = 16
# A Python process starts slowly inside the lab: the first sync may take a while.
START_PATIENCE = 180.0
PATIENCE = 30.0
# Less than one poll of the daemon (0.5 s): the folder never looks stable while filled.
BETWEEN_FILES = 0.3


def virtual_servers() -> set[str]:
    return {line.split()[2] for line in sh("ipvsadm", "-Sn").splitlines() if line.startswith("-A")}


def cluster_ips(count: int) -> set[str]:
    return {f"10.96.0.{index + 1}:80" for index in range(count)}


def wait_for(predicate: Callable[[], bool], patience: float) -> None:
    deadline = time.monotonic() + patience
    while not predicate():
        assert time.monotonic() < deadline, "gave up waiting"
        time.sleep(0.2)


def write(path: Path, objects: list[dict[str, Any]]) -> None:
    partial = path.with_name(f".{path.name}.part")
    partial.write_text(json.dumps(objects))
    partial.rename(path)


def node_manifest(lab_node: Node) -> dict[str, Any]:
    return node(address=str(lab_node.ipv4))


class Sampler:
    """Counts the test's virtual servers in the kernel, over and over, while in its block."""

    def __init__(self) -> None:
        self.counts: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.counts.append(len(virtual_servers() & cluster_ips(SERVICES)))

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


class Daemon:
    def __init__(self, folder: Path, log: Path) -> None:
        self.log = log
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ipvsproxy",
                "run",
                "--source",
                str(folder),
                "--hostname-override",
                NODE,
                "--healthz-bind-address",
                "127.0.0.1:0",
                "--metrics-bind-address",
                "127.0.0.1:0",
                "--ipvs-min-sync-period",
                "0s",
                "--source-max-file-size",
                "64Ki",
                "--logging-format",
                "json",
            ],
            stderr=log.open("w"),
            text=True,
        )

    def messages(self) -> list[str]:
        lines = self.log.read_text().splitlines()
        return [json.loads(line)["msg"] for line in lines if line.startswith("{")]


@pytest.fixture
def folder(tmp_path: Path, node: Node) -> Path:
    cluster = tmp_path / "cluster"
    cluster.mkdir()
    write(cluster / "node.json", [node_manifest(node)])
    for index in range(SERVICES):
        write(cluster / f"svc-{index:02}.json", [service(index)])
    return cluster


@pytest.fixture
def daemon(folder: Path, tmp_path: Path) -> Iterator[Daemon]:
    running = Daemon(folder, tmp_path / "daemon.log")
    yield running
    running.process.kill()
    running.process.wait()
    # Shown with a failing test's captured output.
    print(running.log.read_text())
    subprocess.run([sys.executable, "-m", "ipvsproxy", "cleanup"], capture_output=True, check=False)


def test_the_folder_survives_a_fifo_a_big_file_and_being_recreated_file_by_file(
    folder: Path, daemon: Daemon, node: Node
) -> None:
    wait_for(lambda: virtual_servers() >= cluster_ips(SERVICES), START_PATIENCE)

    # A FIFO nobody writes to: the watcher must not block on it.
    os.mkfifo(folder / "pipe.yaml")
    write(folder / f"svc-{SERVICES:02}.json", [service(SERVICES)])
    wait_for(lambda: virtual_servers() >= cluster_ips(SERVICES + 1), PATIENCE)
    (folder / f"svc-{SERVICES:02}.json").unlink()
    (folder / "pipe.yaml").unlink()
    wait_for(lambda: virtual_servers() == cluster_ips(SERVICES), PATIENCE)

    # A file past --source-max-file-size: refused in one line, the last good reading kept.
    big = folder / "big.json"
    big.write_text(json.dumps([service(99, note="x" * (64 << 10))]))
    wait_for(lambda: any("over the bound of 65536 bytes" in m for m in daemon.messages()), PATIENCE)
    assert virtual_servers() == cluster_ips(SERVICES)
    big.unlink()

    # Deleted and re-created one file at a time, faster than two polls: never programmed half
    # full. (A folder filled slower than that looks stable in between: fill another folder and
    # rename it into place.)
    with Sampler() as sampler:
        shutil.rmtree(folder)
        folder.mkdir()
        write(folder / "node.json", [node_manifest(node)])
        for index in range(SERVICES):
            write(folder / f"svc-{index:02}.json", [service(index)])
            time.sleep(BETWEEN_FILES)
    assert sampler.counts and min(sampler.counts) == SERVICES, sampler.counts
    assert any(
        "waiting until the folder has been stable for 2 polls" in m for m in daemon.messages()
    )

    # Most of it deleted for real: applied once the folder is stable.
    for index in range(1, SERVICES):
        (folder / f"svc-{index:02}.json").unlink()
    wait_for(lambda: virtual_servers() & cluster_ips(SERVICES) == cluster_ips(1), PATIENCE)
    assert any(
        m.endswith(f"stable for 2 polls; deleting {SERVICES - 1} of {SERVICES} services")
        for m in daemon.messages()
    )
    assert daemon.process.poll() is None
