"""On the real kernel: every scheduler passes the probe without a trace, and IPVS sysctls take."""

from __future__ import annotations

from ipvsproxy.kernel.ipvs import NetlinkIPVS
from ipvsproxy.kernel.ipvs_sysctls import (
    ensure_ipvs_sysctls,
    parse_kernel_release,
    wanted_sysctls,
)
from ipvsproxy.kernel.preconditions import check_schedulers
from ipvsproxy.kernel.sysctl import ProcSysctl
from ipvsproxy.model import SCHEDULERS


def test_the_lab_kernel_accepts_every_scheduler_and_keeps_no_probe() -> None:
    with NetlinkIPVS() as ipvs:
        before = ipvs.dump()
        check_schedulers(ipvs, SCHEDULERS)
        assert ipvs.dump().keys() == before.keys()


def test_ipvs_sysctls_are_written_and_read_back() -> None:
    sysctl = ProcSysctl()
    before = sysctl.get("net.ipv4.vs.conntrack")
    try:
        for value in ("1", "0"):
            sysctl.set("net.ipv4.vs.conntrack", value)
            assert sysctl.get("net.ipv4.vs.conntrack") == value
    finally:
        sysctl.set("net.ipv4.vs.conntrack", before or "0")


def test_kube_proxys_ipvs_sysctls_take_on_the_lab_kernel() -> None:
    sysctl = ProcSysctl()
    release = parse_kernel_release(sysctl.get("kernel.osrelease") or "")
    wanted = dict(wanted_sysctls(release, strict_arp=True))
    before = {name: sysctl.get(name) for name in wanted}
    try:
        ensure_ipvs_sysctls(sysctl, strict_arp=True)

        assert {name: sysctl.get(name) for name in wanted} == wanted
        assert ensure_ipvs_sysctls(sysctl, strict_arp=True) == ()
    finally:
        for name, value in before.items():
            sysctl.set(name, value or "0")
