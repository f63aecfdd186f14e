"""Kernel parameters kube-proxy's IPVS mode sets, planned like every other change.

The sysctls are set the same way and only where they differ. net.ipv4.vs.conn_reuse_mode
follows the kernel release as kube-proxy decides: before 4.1 the parameter does not exist;
from 5.9 on the kernel no longer delays reused connections by a second with conntrack on
(kubernetes#93297, linux 35dfb013149f), so it is left as found; in between it is set to 0.
A release that cannot be read leaves it as found too.

The IPVS timeouts are set only when configured (non-zero), as kube-proxy sets them, and only
when the kernel's differ.

Conntrack's parameters (kube-proxy's ``conntrack.*`` fields) come first, as kube-proxy sets
them before its proxier's: ``nf_conntrack_max`` only ever raised, and nf_conntrack's hash
table with it to a quarter of the maximum; the timeouts and ``tcp_be_liberal`` set where
configured (non-zero) and different. One the kernel does not have (nf_conntrack not loaded
yet: the proxy's own iptables rules load it) is left for a later full sync.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from ipvsproxy.kernel.protocols import CONNTRACK_HASHSIZE
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
CONNTRACK_MAX = "net.netfilter.nf_conntrack_max"
CONNTRACK_TCP_ESTABLISHED = "net.netfilter.nf_conntrack_tcp_timeout_established"
CONNTRACK_TCP_CLOSE_WAIT = "net.netfilter.nf_conntrack_tcp_timeout_close_wait"
CONNTRACK_TCP_BE_LIBERAL = "net.netfilter.nf_conntrack_tcp_be_liberal"
CONNTRACK_UDP = "net.netfilter.nf_conntrack_udp_timeout"
CONNTRACK_UDP_STREAM = "net.netfilter.nf_conntrack_udp_timeout_stream"
CONNTRACK = (
    CONNTRACK_MAX,
    CONNTRACK_HASHSIZE,
    CONNTRACK_TCP_ESTABLISHED,
    CONNTRACK_TCP_CLOSE_WAIT,
    CONNTRACK_TCP_BE_LIBERAL,
    CONNTRACK_UDP,
    CONNTRACK_UDP_STREAM,
)
# Every parameter planning reads.
READ = (
    KERNEL_RELEASE,
    CONN_REUSE_MODE,
    *(name for name, _ in (*ALWAYS, *STRICT_ARP)),
    *CONNTRACK,
)
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


@dataclass(frozen=True, slots=True)
class ConntrackSettings:
    """kube-proxy's ``conntrack.*`` as the kernel takes them; 0 (False) leaves one as it is."""

    # nf_conntrack_max: maxPerCore times the node's CPUs, at least min (config.py).
    max: int = 0
    # Seconds.
    tcp_established: int = 0
    tcp_close_wait: int = 0
    tcp_be_liberal: bool = False
    udp: int = 0
    udp_stream: int = 0


LEAVE_CONNTRACK = ConntrackSettings()


def _number(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _wanted_conntrack(
    settings: ConntrackSettings, current: Mapping[str, str | None]
) -> Iterator[tuple[str, int]]:
    """(parameter, value) pairs kube-proxy would write, given the kernel's ``current``."""
    if settings.max:
        # Raised, never lowered: the node may have been given more than we ask.
        if (_number(current.get(CONNTRACK_MAX)) or 0) < settings.max:
            yield CONNTRACK_MAX, settings.max
        buckets = settings.max // 4
        if (_number(current.get(CONNTRACK_HASHSIZE)) or 0) < buckets:
            yield CONNTRACK_HASHSIZE, buckets
    for name, value in (
        (CONNTRACK_TCP_ESTABLISHED, settings.tcp_established),
        (CONNTRACK_TCP_CLOSE_WAIT, settings.tcp_close_wait),
        (CONNTRACK_TCP_BE_LIBERAL, int(settings.tcp_be_liberal)),
        (CONNTRACK_UDP, settings.udp),
        (CONNTRACK_UDP_STREAM, settings.udp_stream),
    ):
        if value and _number(current.get(name)) != value:
            yield name, value


def plan_sysctls(
    current: Mapping[str, str | None] | None,
    *,
    strict_arp: bool,
    conntrack: ConntrackSettings = LEAVE_CONNTRACK,
) -> tuple[SetSysctl, ...]:
    """What differs, in kube-proxy's order; ``current``: the values of ``READ``, or None when
    they were not read (nothing is planned)."""
    if current is None:
        return ()
    release = current.get(KERNEL_RELEASE)
    kernel = parse_kernel_release(release) if release is not None else None
    conntrack_ops = tuple(
        SetSysctl(name, str(value), current[name])
        for name, value in _wanted_conntrack(conntrack, current)
        if current.get(name) is not None
    )
    return conntrack_ops + tuple(
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
