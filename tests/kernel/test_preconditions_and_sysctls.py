"""On the real kernel: every scheduler passes the probe without a trace, and IPVS sysctls take."""

from __future__ import annotations

from ipvsproxy.kernel.ipvs import NetlinkIPVS
from ipvsproxy.kernel.preconditions import check_schedulers
from ipvsproxy.kernel.sysctl import ProcSysctl
from ipvsproxy.model import SCHEDULERS
from ipvsproxy.reconcile.parameters import KERNEL_RELEASE, READ, plan_sysctls


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
    before = {name: sysctl.get(name) for name in READ}
    try:
        for op in plan_sysctls(before, strict_arp=True):
            sysctl.set(op.name, op.value)

        assert plan_sysctls({name: sysctl.get(name) for name in READ}, strict_arp=True) == ()
    finally:
        for name, value in before.items():
            if name != KERNEL_RELEASE and value is not None:
                sysctl.set(name, value)
