"""On the real kernel: IPVS modules load as the kernel allows, as they do for kube-proxy.

Each test makes its own condition: it unloads the modules itself, with the kernel's module
loader (kernel.modprobe) pointed at the lab's modules (the ``module_loader`` fixture), or at
/bin/false for a kernel that can load nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner, Result

from ipvsproxy.cli import main
from ipvsproxy.kernel.iptables.restore import IptablesRestore
from ipvsproxy.kernel.sysctl import ProcSysctl
from ipvsproxy.model import IPFamily
from tests.kernel.conftest import MODULE_LOADER
from tests.lab.modules import delete_virtual_servers, loaded, unload
from tests.lab.netns import sh

SERVICE_IP = "10.96.66.1"


def _manifest(path: Path) -> Path:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "modules", "namespace": "default"},
        "spec": {"clusterIP": SERVICE_IP, "ports": [{"name": "p", "port": 80}]},
    }
    document: dict[str, Any] = {"apiVersion": "v1", "kind": "List", "items": [service]}
    path.write_text(yaml.safe_dump(document))
    return path


def _run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def _sync(tmp_path: Path, scheduler: str) -> Result:
    source = str(_manifest(tmp_path / "cluster.yaml"))
    return _run("sync", "--once", "--source", source, "--ipvs-scheduler", scheduler)


def test_sync_loads_a_scheduler_module_that_is_not_loaded(
    module_loader: ProcSysctl, tmp_path: Path
) -> None:
    delete_virtual_servers("wlc")
    unload("ip_vs_wlc")
    try:
        done = _sync(tmp_path, "wlc")
        assert done.exit_code == 0, done.output
        assert f"-A -t {SERVICE_IP}:80 -s wlc" in sh("ipvsadm", "-Sn").splitlines()
        assert loaded("ip_vs_wlc")
        # The throwaway virtual server the scheduler was tried on is gone.
        assert "198.18.0.1" not in sh("ipvsadm", "-Sn")
    finally:
        _run("cleanup")


def test_a_scheduler_the_kernel_cannot_load_fails_in_one_line(
    module_loader: ProcSysctl, tmp_path: Path
) -> None:
    delete_virtual_servers("wlc")
    unload("ip_vs_wlc")
    module_loader.set(MODULE_LOADER, "/bin/false")
    try:
        done = _sync(tmp_path, "wlc")
        assert done.exit_code == 2, done.output
        assert done.output.count("\n") == 1
        assert "refuses IPVS scheduler 'wlc'" in done.output
        assert "modprobe ip_vs_wlc" in done.output
        assert SERVICE_IP not in sh("ipvsadm", "-Sn")
    finally:
        _run("cleanup")


def _unload_ipvs() -> None:
    delete_virtual_servers()
    unload("ip_vs")


def test_show_loads_ip_vs_when_it_is_not_loaded(module_loader: ProcSysctl) -> None:
    _unload_ipvs()
    done = _run("show", "--output", "json")
    assert done.exit_code == 0, done.output
    assert loaded("ip_vs")


def test_cleanup_without_ipvs_still_removes_sets_chains_and_kube_ipvs0(
    module_loader: ProcSysctl, tmp_path: Path
) -> None:
    assert _sync(tmp_path, "rr").exit_code == 0
    _unload_ipvs()
    module_loader.set(MODULE_LOADER, "/bin/false")
    done = _run("cleanup")
    assert done.exit_code == 0, done.output
    assert not Path("/sys/class/net/kube-ipvs0").exists()
    assert "KUBE-CLUSTER-IP" not in sh("ipset", "list", "-n").split()
    assert IptablesRestore().our_chains(IPFamily.IPV4) == {}
    assert not loaded("ip_vs")
    done = _run("show")
    assert done.exit_code == 2
    assert done.output.startswith("ipvsproxy: the kernel offers no IPVS")
