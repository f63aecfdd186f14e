"""What the machine must offer before ipvsproxy touches the kernel, each lack in one line."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ipvsproxy.kernel.errors import PreconditionError

# linux/capability.h: the one capability programming IPVS, addresses and netfilter needs.
CAP_NET_ADMIN = 12


def effective_capabilities(proc: Path = Path("/proc")) -> int:
    """This process's effective capability set (CapEff), as the kernel reports it."""
    for line in (proc / "self" / "status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == "CapEff":
            return int(value.strip(), 16)
    return 0


def check_ipvs(
    schedulers: Iterable[str] = (),
    *,
    proc: Path = Path("/proc"),
    modules: Path = Path("/sys/module"),
) -> None:
    # The capability, not the user id: root in a container without NET_ADMIN cannot write
    # IPVS, and a non-root process granted NET_ADMIN can.
    if not effective_capabilities(proc) >> CAP_NET_ADMIN & 1:
        raise PreconditionError(
            "ipvsproxy needs CAP_NET_ADMIN (run as root or grant it) to program IPVS"
        )
    if not (proc / "net" / "ip_vs").exists():
        raise PreconditionError("the ip_vs kernel module is not loaded; run modprobe ip_vs")
    missing = sorted(s for s in set(schedulers) if not (modules / f"ip_vs_{s}").exists())
    if missing:
        names = " ".join(f"ip_vs_{s}" for s in missing)
        raise PreconditionError(f"IPVS scheduler modules are not loaded; run modprobe {names}")
