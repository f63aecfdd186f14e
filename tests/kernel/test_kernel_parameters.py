"""On the real kernel: `sync --once` sets IPVS timeouts, sysctls and the masquerade mark.

The timeouts read back through `ipvsadm -L --timeout`, as an operator would check them; each
test restores the kernel-wide values it changed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from ipvsproxy.cli import main
from ipvsproxy.kernel.iptables.restore import IptablesRestore
from ipvsproxy.kernel.sysctl import ProcSysctl
from ipvsproxy.model import IPFamily
from ipvsproxy.reconcile.parameters import KERNEL_RELEASE, READ
from tests.lab.netns import sh

TIMEOUTS = re.compile(r"Timeout \(tcp tcpfin udp\): (\d+) (\d+) (\d+)")


def _timeouts() -> tuple[int, int, int]:
    found = TIMEOUTS.search(sh("ipvsadm", "-L", "--timeout"))
    assert found is not None
    tcp, tcp_fin, udp = (int(value) for value in found.groups())
    return tcp, tcp_fin, udp


@pytest.fixture
def kernel_wide() -> Iterator[tuple[int, int, int]]:
    """The timeouts before the test (yielded) and the sysctls; both put back after it."""
    sysctl = ProcSysctl()
    sysctls = {name: sysctl.get(name) for name in READ if name != KERNEL_RELEASE}
    before = _timeouts()
    try:
        yield before
    finally:
        sh("ipvsadm", "--set", *map(str, before))
        for name, value in sysctls.items():
            if value is not None:
                sysctl.set(name, value)


def _manifest(path: Path) -> Path:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "parameters", "namespace": "default"},
        "spec": {"clusterIP": "10.96.55.1", "ports": [{"name": "p", "port": 80}]},
    }
    document: dict[str, Any] = {"apiVersion": "v1", "kind": "List", "items": [service]}
    path.write_text(yaml.safe_dump(document))
    return path


def _sync(source: Path, *flags: str) -> Result:
    args = ["sync", "--once", "--source", str(source), "--output", "json", *flags]
    return CliRunner().invoke(main, args)


def _applied(result: Result, kind: str) -> list[str]:
    return [op["text"] for op in json.loads(result.output)["applied"] if op["op"] == kind]


def test_timeouts_sysctls_and_masquerade_bit_are_set_once(
    kernel_wide: tuple[int, int, int], tmp_path: Path
) -> None:
    _, tcp_fin_before, _ = kernel_wide
    sh("ipvsadm", "--set", "900", str(tcp_fin_before), "300")
    ProcSysctl().set("net.ipv4.conf.all.arp_announce", "0")
    source = _manifest(tmp_path / "cluster.yaml")
    flags = (
        "--ipvs-tcp-timeout=1h",
        "--ipvs-udp-timeout=45s",
        "--iptables-masquerade-bit=5",
        "--ipvs-strict-arp",
    )
    try:
        first = _sync(source, *flags)
        assert first.exit_code == 0, first.output
        assert _applied(first, "SetIPVSTimeouts") == ["set IPVS timeouts tcp 3600s, udp 45s"]
        assert "set sysctl net.ipv4.conf.all.arp_announce 0 -> 2" in _applied(first, "SetSysctl")
        # tcpfin was not configured, so the kernel's stays.
        assert _timeouts() == (3600, tcp_fin_before, 45)
        assert ProcSysctl().get("net.ipv4.conf.all.arp_announce") == "2"
        saved = IptablesRestore().netfilter.save(IPFamily.IPV4)
        assert "-A KUBE-MARK-MASQ -j MARK --set-xmark 0x20/0x20" in saved.splitlines()

        second = _sync(source, *flags)
        assert second.exit_code == 0, second.output
        for kind in ("SetIPVSTimeouts", "SetSysctl", "RestoreIptables"):
            assert _applied(second, kind) == [], kind
    finally:
        CliRunner().invoke(main, ["cleanup"])
