"""What the machine must offer before ipvsproxy touches the kernel, each lack in one line."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ipvsproxy.kernel.errors import PreconditionError


def check_ipvs(
    schedulers: Iterable[str] = (),
    *,
    proc: Path = Path("/proc"),
    modules: Path = Path("/sys/module"),
    euid: int | None = None,
) -> None:
    if (os.geteuid() if euid is None else euid) != 0:
        raise PreconditionError(
            "ipvsproxy must run as root (or with CAP_NET_ADMIN) to program IPVS"
        )
    if not (proc / "net" / "ip_vs").exists():
        raise PreconditionError("the ip_vs kernel module is not loaded; run modprobe ip_vs")
    missing = sorted(s for s in set(schedulers) if not (modules / f"ip_vs_{s}").exists())
    if missing:
        names = " ".join(f"ip_vs_{s}" for s in missing)
        raise PreconditionError(f"IPVS scheduler modules are not loaded; run modprobe {names}")
