"""What the machine must offer before ipvsproxy touches the kernel, each lack in one line.

Nothing is judged from files but the capability: the kernel loads ip_vs when the IPVS
generic netlink family is asked for, and a scheduler's module when a virtual server first
uses it, so the only honest test is to ask it, as kube-proxy does (a throwaway virtual
server with the scheduler, deleted at once).
"""

from __future__ import annotations

import errno
import ipaddress
from collections.abc import Iterable
from pathlib import Path

from ipvsproxy.kernel.errors import PreconditionError
from ipvsproxy.kernel.protocols import IPVSKernel
from ipvsproxy.model import (
    AddVirtualServer,
    DeleteVirtualServer,
    OpError,
    TransportProtocol,
    VirtualServer,
    VirtualServerKey,
)

# linux/capability.h: the one capability programming IPVS, addresses and netfilter needs.
CAP_NET_ADMIN = 12
# RFC 2544's benchmarking range: never a service, pod or node address.
PROBE_ADDRESS = ipaddress.IPv4Address("198.18.0.1")
# Ports tried in turn should a virtual server already sit on the first (it is never touched).
PROBE_PORTS = (20000, 20001, 20002, 20003)


def effective_capabilities(proc: Path = Path("/proc")) -> int:
    """This process's effective capability set (CapEff), as the kernel reports it."""
    for line in (proc / "self" / "status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == "CapEff":
            return int(value.strip(), 16)
    return 0


def require_net_admin(proc: Path = Path("/proc")) -> None:
    # The capability, not the user id: root in a container without NET_ADMIN cannot write
    # IPVS, and a non-root process granted NET_ADMIN can.
    if not effective_capabilities(proc) >> CAP_NET_ADMIN & 1:
        raise PreconditionError(
            "ipvsproxy needs CAP_NET_ADMIN (run as root or grant it) to program IPVS"
        )


def check_schedulers(ipvs: IPVSKernel, schedulers: Iterable[str]) -> None:
    """Raise unless the kernel accepts a virtual server with each scheduler (loading its module)."""
    for scheduler in sorted(set(schedulers)):
        refused = try_scheduler(ipvs, scheduler)
        if refused is None:
            continue
        if refused.errno == errno.EEXIST:
            raise PreconditionError(f"cannot test IPVS scheduler {scheduler!r}: {refused.message}")
        raise PreconditionError(
            f"the kernel refuses IPVS scheduler {scheduler!r} ({refused.message}); load its "
            f"module (modprobe ip_vs_{scheduler}) or choose another with --ipvs-scheduler"
        )


def try_scheduler(ipvs: IPVSKernel, scheduler: str) -> OpError | None:
    """None when the kernel takes a virtual server with ``scheduler`` (which loads its module);
    else its refusal, or EEXIST when every port to try it on is taken by someone else's."""
    for port in PROBE_PORTS:
        probe = VirtualServer(
            VirtualServerKey(TransportProtocol.TCP, PROBE_ADDRESS, port), scheduler
        )
        (refused,) = ipvs.apply([AddVirtualServer(probe)])
        if refused is None:
            ipvs.apply([DeleteVirtualServer(probe.key)])
            return None
        if refused.errno != errno.EEXIST:
            return refused
    taken = ", ".join(f"{PROBE_ADDRESS}:{port}" for port in PROBE_PORTS)
    return OpError(
        errno.EEXIST,
        f"virtual servers already use {taken}; delete them (ipvsadm -D -t ADDRESS:PORT)",
    )
