"""Kernel parameters kube-proxy's IPVS mode sets, planned like every other change.

The sysctls are set the same way and only where they differ. net.ipv4.vs.conn_reuse_mode
follows the kernel release as kube-proxy decides: before 4.1 the parameter does not exist;
from 5.9 on the kernel no longer delays reused connections by a second with conntrack on
(kubernetes#93297, linux 35dfb013149f), so it is left as found; in between it is set to 0.
A release that cannot be read leaves it as found too.

The IPVS timeouts are set only when configured (non-zero), as kube-proxy sets them, and only
when the kernel's differ.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ipvsproxy.model import IPVSTimeouts, SetIPVSTimeouts, SetSysctl

KERNEL_RELEASE = "kernel.osrelease"
CONN_REUSE_MODE = "net.ipv4.vs.conn_reuse_mode"
CONN_REUSE_MIN_KERNEL = (4, 1)
CONN_REUSE_FIXED_KERNEL = (5, 9)
ALWAYS = (
    ("net.ipv4.vs.conntrack", "1"),
    ("net.ipv4.vs.expire_nodest_conn", "1"),
    ("net.ipv4.vs.expire_quiescent_template", "1"),
    ("net.ipv4.ip_forward", "1"),
)
STRICT_ARP = (("net.ipv4.conf.all.arp_ignore", "1"), ("net.ipv4.conf.all.arp_announce", "2"))
# Every parameter planning reads.
READ = (KERNEL_RELEASE, CONN_REUSE_MODE, *(name for name, _ in (*ALWAYS, *STRICT_ARP)))
_RELEASE = re.compile(r"\s*v?(\d+(?:\.\d+)+)")


def parse_kernel_release(release: str) -> tuple[int, ...] | None:
    """ "6.1.0-18-amd64" -> (6, 1, 0): the leading dotted numbers, at least two of them."""
    found = _RELEASE.match(release)
    return None if found is None else tuple(int(part) for part in found.group(1).split("."))


def wanted_sysctls(
    kernel: tuple[int, ...] | None, *, strict_arp: bool
) -> tuple[tuple[str, str], ...]:
    reuse = (
        ((CONN_REUSE_MODE, "0"),)
        if kernel is not None and CONN_REUSE_MIN_KERNEL <= kernel < CONN_REUSE_FIXED_KERNEL
        else ()
    )
    return (*ALWAYS[:1], *reuse, *ALWAYS[1:], *(STRICT_ARP if strict_arp else ()))


def plan_sysctls(
    current: Mapping[str, str | None] | None, *, strict_arp: bool
) -> tuple[SetSysctl, ...]:
    """What differs, in kube-proxy's order; ``current``: the values of ``READ``, or None when
    they were not read (nothing is planned)."""
    if current is None:
        return ()
    release = current.get(KERNEL_RELEASE)
    kernel = parse_kernel_release(release) if release is not None else None
    return tuple(
        SetSysctl(name, value, current.get(name))
        for name, value in wanted_sysctls(kernel, strict_arp=strict_arp)
        if current.get(name) != value
    )


def plan_timeouts(
    wanted: IPVSTimeouts, current: IPVSTimeouts | None
) -> tuple[SetIPVSTimeouts, ...]:
    """One op when a configured (non-zero) timeout differs from the kernel's; else none, and
    none when the kernel's were not read."""
    if current is None:
        return ()
    pairs = (
        (wanted.tcp, current.tcp),
        (wanted.tcp_fin, current.tcp_fin),
        (wanted.udp, current.udp),
    )
    return (SetIPVSTimeouts(wanted),) if any(w and w != c for w, c in pairs) else ()
