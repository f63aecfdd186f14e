"""The kernel parameters kube-proxy's IPVS mode sets, set the same way and only where they differ.

net.ipv4.vs.conn_reuse_mode follows the kernel release as kube-proxy decides: before 4.1 the
parameter does not exist; from 5.9 on the kernel no longer delays reused connections by a
second with conntrack on (kubernetes#93297, linux 35dfb013149f), so it is left as found;
in between it is set to 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ipvsproxy.kernel.errors import SysctlError
from ipvsproxy.kernel.protocols import SysctlKernel

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
_RELEASE = re.compile(r"\s*v?(\d+(?:\.\d+)+)")


@dataclass(frozen=True, slots=True)
class SysctlChange:
    name: str
    before: str
    after: str


def parse_kernel_release(release: str) -> tuple[int, ...]:
    """ "6.1.0-18-amd64" -> (6, 1, 0): the leading dotted numbers, at least two of them."""
    found = _RELEASE.match(release)
    if found is None:
        raise SysctlError(f"cannot read a kernel version from {release!r}")
    return tuple(int(part) for part in found.group(1).split("."))


def wanted_sysctls(kernel: tuple[int, ...], *, strict_arp: bool) -> tuple[tuple[str, str], ...]:
    reuse = (
        ((CONN_REUSE_MODE, "0"),)
        if CONN_REUSE_MIN_KERNEL <= kernel < CONN_REUSE_FIXED_KERNEL
        else ()
    )
    return (*ALWAYS[:1], *reuse, *ALWAYS[1:], *(STRICT_ARP if strict_arp else ()))


def ensure_ipvs_sysctls(sysctl: SysctlKernel, *, strict_arp: bool) -> tuple[SysctlChange, ...]:
    """Set what differs, in kube-proxy's order; stop at the first parameter that fails."""
    release = sysctl.get("kernel.osrelease")
    if release is None:
        raise SysctlError("cannot read kernel.osrelease to choose net.ipv4.vs.conn_reuse_mode")
    changes = []
    for name, value in wanted_sysctls(parse_kernel_release(release), strict_arp=strict_arp):
        before = sysctl.get(name)
        if before == value:
            continue
        try:
            sysctl.set(name, value)
        except OSError as error:
            reason = error.strerror or type(error).__name__
            raise SysctlError(f"cannot set sysctl {name}={value}: {reason}") from None
        changes.append(SysctlChange(name, before or "", value))
    return tuple(changes)
