"""Fixtures for the lab tier: a node, pods, and clients inside the User-Mode Linux kernel."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ipvsproxy.kernel.sysctl import ProcSysctl
from tests.api.fake_apiserver import FakeApiServer
from tests.lab import IN_LAB, UNAVAILABLE_REASON, chart_pod
from tests.lab.netns import Client, Node, Pod, sh

UML_MODULES = Path("/usr/lib/uml/modules")
MODULE_LOADER = "kernel.modprobe"


@pytest.fixture(autouse=True)
def _require_lab() -> None:
    if IN_LAB:
        return
    reason = UNAVAILABLE_REASON or "lab tests run inside the lab: python -m tests.lab tests/kernel"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and the lab did not run: {reason}")
    pytest.skip(reason)


@pytest.fixture
def node() -> Iterator[Node]:
    lab_node = Node()
    lab_node.set_up()
    yield lab_node
    lab_node.tear_down()


@pytest.fixture
def pod(node: Node) -> Callable[[str], Pod]:
    """Make a pod serving TCP and UDP on 8080 that answers with its name."""

    def make(name: str) -> Pod:
        new_pod = node.add_pod(name)
        new_pod.serve(8080)
        return new_pod

    return make


@pytest.fixture
def client() -> Callable[[Pod | None], Client]:
    """A client in a pod's namespace, or on the node itself for None."""
    return lambda where: Client(where.namespace if where else None)


@pytest.fixture
def modules_root(tmp_path: Path) -> Path:
    """A module tree modprobe can use inside the lab: lib/modules/RELEASE -> the UML modules."""
    release = os.uname().release
    tree = tmp_path / "modules" / "lib" / "modules"
    tree.mkdir(parents=True)
    (tree / release).symlink_to(UML_MODULES / release)
    return tmp_path / "modules"


@pytest.fixture
def module_loader(tmp_path: Path, modules_root: Path) -> Iterator[ProcSysctl]:
    """kernel.modprobe pointed at the lab's modules by the test itself (the boot does so too),
    so the kernel and iptables load modules on demand as on a real node; the test may point it
    elsewhere. What a test unloads is loaded again after."""
    loader = tmp_path / "modprobe"
    loader.write_text(f'#!/bin/sh\nexec {shutil.which("modprobe")} -d {modules_root} "$@"\n')
    loader.chmod(0o755)
    sysctl = ProcSysctl()
    before = sysctl.get(MODULE_LOADER) or "/sbin/modprobe"
    loaded = {module.name for module in Path("/sys/module").iterdir()}
    sysctl.set(MODULE_LOADER, str(loader))
    try:
        yield sysctl
    finally:
        sysctl.set(MODULE_LOADER, before)
        for module in sorted(loaded - {module.name for module in Path("/sys/module").iterdir()}):
            sh(str(loader), module)


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    """A fake API server on the lab's loopback with the chart tests' node and Service."""
    with FakeApiServer() as server:
        chart_pod.seed(server)
        yield server


@pytest.fixture
def service_account_token() -> Iterator[None]:
    """The kubelet's token and CA files, in the lab's /run tmpfs (never this machine's)."""
    with chart_pod.service_account_token():
        yield
