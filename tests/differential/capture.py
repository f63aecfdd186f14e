"""A node's proxy state, read with the tools an operator uses: ipvsadm, ipset, iptables-save, ip.

Reading with the standard tools, not with our own kernel layer, keeps the comparison honest:
a bug in our readers cannot hide a difference. Each tool runs once per capture, started from
a thread inside the node's namespace (a process start is the dearest thing in the lab).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.lab.netns import inside

# Every parameter either proxy may set, as /proc/sys names them.
SYSCTLS = (
    "net/ipv4/vs/conntrack",
    "net/ipv4/vs/conn_reuse_mode",
    "net/ipv4/vs/expire_nodest_conn",
    "net/ipv4/vs/expire_quiescent_template",
    "net/ipv4/ip_forward",
    "net/ipv6/conf/all/forwarding",
    "net/ipv4/conf/all/arp_ignore",
    "net/ipv4/conf/all/arp_announce",
    "net/ipv4/conf/all/route_localnet",
    "net/netfilter/nf_conntrack_tcp_timeout_established",
    "net/netfilter/nf_conntrack_tcp_timeout_close_wait",
    "net/netfilter/nf_conntrack_tcp_be_liberal",
    "net/netfilter/nf_conntrack_udp_timeout",
    "net/netfilter/nf_conntrack_udp_timeout_stream",
)


@dataclass(frozen=True)
class Capture:
    """The raw texts, as each tool printed them."""

    ipvs: str
    timeouts: str
    ipsets: str
    iptables: str
    ip6tables: str
    interface: str
    sysctls: tuple[tuple[str, str], ...]


def _run(*args: str) -> str:
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        # What the tool said is the state (kube-ipvs0 missing, say): keep it comparable.
        return f"! {' '.join(args[:2])}: exit {done.returncode}: {done.stderr.strip()}\n"
    return done.stdout


def _sysctl(name: str) -> str:
    try:
        return Path("/proc/sys", name).read_text().strip()
    except OSError as error:
        return f"! {error.strerror}"


def capture(namespace: str, iptables_flavour: str) -> Capture:
    with inside(namespace):
        return Capture(
            ipvs=_run("ipvsadm", "-Sn"),
            timeouts=_run("ipvsadm", "-L", "--timeout"),
            ipsets=_run("ipset", "save"),
            iptables=_run(f"iptables-{iptables_flavour}-save"),
            ip6tables=_run(f"ip6tables-{iptables_flavour}-save"),
            interface=_interface(),
            sysctls=tuple((name, _sysctl(name)) for name in SYSCTLS),
        )


def _interface() -> str:
    done = subprocess.run(
        ["ip", "-o", "-d", "-batch", "-"],
        input="link show dev kube-ipvs0\naddr show dev kube-ipvs0\n",
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout + (f"! {done.stderr.strip()}\n" if done.returncode else "")
