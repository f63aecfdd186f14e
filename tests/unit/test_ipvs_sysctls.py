"""kube-proxy's IPVS sysctls: which, by kernel release, and set only where they differ."""

from __future__ import annotations

import pytest

from ipvsproxy.kernel.errors import SysctlError
from ipvsproxy.kernel.ipvs_sysctls import (
    SysctlChange,
    ensure_ipvs_sysctls,
    parse_kernel_release,
    wanted_sysctls,
)
from ipvsproxy.kernel.sysctl import FakeSysctl

NAMES = (
    "net.ipv4.vs.conntrack",
    "net.ipv4.vs.conn_reuse_mode",
    "net.ipv4.vs.expire_nodest_conn",
    "net.ipv4.vs.expire_quiescent_template",
    "net.ipv4.ip_forward",
    "net.ipv4.conf.all.arp_ignore",
    "net.ipv4.conf.all.arp_announce",
)


def _kernel(release: str, **values: str) -> FakeSysctl:
    return FakeSysctl({"kernel.osrelease": release, **dict.fromkeys(NAMES, "0"), **values})


@pytest.mark.parametrize(
    ("release", "version"),
    [
        ("6.1.0-18-amd64", (6, 1, 0)),
        ("6.1.176", (6, 1, 176)),
        ("5.4.0-150-generic", (5, 4, 0)),
        ("4.19.112+", (4, 19, 112)),
        ("3.10.0-1160.el7.x86_64", (3, 10, 0)),
        ("v5.10", (5, 10)),
        ("5.15.90.1-microsoft-standard-WSL2\n", (5, 15, 90, 1)),
    ],
)
def test_parse_kernel_release(release: str, version: tuple[int, ...]) -> None:
    assert parse_kernel_release(release) == version


@pytest.mark.parametrize("release", ["", "linux", "6", "6-rc1", "x6.1"])
def test_unparseable_kernel_release(release: str) -> None:
    with pytest.raises(SysctlError, match="cannot read a kernel version"):
        parse_kernel_release(release)


@pytest.mark.parametrize(
    ("version", "conn_reuse_mode"),
    [
        ((3, 10, 0), None),
        ((4, 0, 9), None),
        ((4, 1), "0"),
        ((4, 19, 112), "0"),
        ((5, 8, 18), "0"),
        ((5, 9), None),
        ((5, 9, 0), None),
        ((6, 1, 0), None),
    ],
)
def test_conn_reuse_mode_follows_the_kernel_as_kube_proxy_does(
    version: tuple[int, ...], conn_reuse_mode: str | None
) -> None:
    wanted = dict(wanted_sysctls(version, strict_arp=False))
    assert wanted.get("net.ipv4.vs.conn_reuse_mode") == conn_reuse_mode


def test_ensure_sets_what_differs_and_reports_it() -> None:
    sysctl = _kernel(
        "5.4.0-150-generic",
        **{"net.ipv4.ip_forward": "1", "net.ipv4.vs.conn_reuse_mode": "1"},
    )

    changes = ensure_ipvs_sysctls(sysctl, strict_arp=False)

    assert changes == (
        SysctlChange("net.ipv4.vs.conntrack", "0", "1"),
        SysctlChange("net.ipv4.vs.conn_reuse_mode", "1", "0"),
        SysctlChange("net.ipv4.vs.expire_nodest_conn", "0", "1"),
        SysctlChange("net.ipv4.vs.expire_quiescent_template", "0", "1"),
    )
    assert sysctl.values["net.ipv4.conf.all.arp_ignore"] == "0"
    assert ensure_ipvs_sysctls(sysctl, strict_arp=False) == ()


def test_conn_reuse_mode_is_left_as_found_on_a_fixed_kernel() -> None:
    sysctl = _kernel("6.1.0-18-amd64", **{"net.ipv4.vs.conn_reuse_mode": "1"})

    ensure_ipvs_sysctls(sysctl, strict_arp=False)

    assert sysctl.values["net.ipv4.vs.conn_reuse_mode"] == "1"


def test_strict_arp_only_when_asked() -> None:
    sysctl = _kernel("6.1.0")

    changes = ensure_ipvs_sysctls(sysctl, strict_arp=True)

    assert changes[-2:] == (
        SysctlChange("net.ipv4.conf.all.arp_ignore", "0", "1"),
        SysctlChange("net.ipv4.conf.all.arp_announce", "0", "2"),
    )


def test_a_missing_parameter_is_one_clear_error() -> None:
    sysctl = _kernel("6.1.0")
    del sysctl.values["net.ipv4.vs.expire_nodest_conn"]

    with pytest.raises(SysctlError, match=r"^cannot set sysctl net.ipv4.vs.expire_nodest_conn=1"):
        ensure_ipvs_sysctls(sysctl, strict_arp=False)


def test_an_unknown_kernel_release_is_one_clear_error() -> None:
    sysctl = _kernel("6.1.0")
    del sysctl.values["kernel.osrelease"]

    with pytest.raises(SysctlError, match=r"kernel\.osrelease"):
        ensure_ipvs_sysctls(sysctl, strict_arp=False)
