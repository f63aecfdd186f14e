"""On the real kernel: IPVS with every scheduler passes the check, and IPVS sysctls take."""

from __future__ import annotations

from ipvsproxy.kernel.preconditions import check_ipvs
from ipvsproxy.kernel.sysctl import ProcSysctl
from ipvsproxy.model import SCHEDULERS


def test_the_lab_kernel_offers_ipvs_and_every_scheduler() -> None:
    check_ipvs(SCHEDULERS)


def test_ipvs_sysctls_are_written_and_read_back() -> None:
    sysctl = ProcSysctl()
    before = sysctl.get("net.ipv4.vs.conntrack")
    try:
        for value in ("1", "0"):
            sysctl.set("net.ipv4.vs.conntrack", value)
            assert sysctl.get("net.ipv4.vs.conntrack") == value
    finally:
        sysctl.set("net.ipv4.vs.conntrack", before or "0")
