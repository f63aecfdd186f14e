"""Kernel parameters under /proc/sys, and an in-memory fake that behaves the same.

A module's parameters (/sys/module/MODULE/parameters/NAME) are read and written the same
way, named ``module.MODULE.parameters.NAME``: nf_conntrack's hash size is one, which
kube-proxy sets beside the conntrack sysctls.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from ipvsproxy.kernel.protocols import MODULE_PREFIX


class ProcSysctl:
    def __init__(self, root: Path = Path("/proc/sys"), modules: Path = Path("/sys/module")) -> None:
        self._root = root
        self._modules = modules

    def _path(self, name: str) -> Path:
        if name.startswith(MODULE_PREFIX):
            return self._modules / name.removeprefix(MODULE_PREFIX).replace(".", "/")
        return self._root / name.replace(".", "/")

    def get(self, name: str) -> str | None:
        try:
            return self._path(name).read_text().strip()
        except FileNotFoundError:
            return None

    def set(self, name: str, value: str) -> None:
        # r+ rather than w: an unknown name must fail as it does in /proc, never create a file.
        with self._path(name).open("r+") as parameter:
            parameter.write(f"{value}\n")
            parameter.truncate()


# A fresh 6.1 kernel with ip_vs loaded, as the fake kernel starts.
FRESH_KERNEL_SYSCTLS = {
    "kernel.osrelease": "6.1.0",
    "net.ipv4.ip_forward": "0",
    "net.ipv4.vs.conntrack": "0",
    "net.ipv4.vs.conn_reuse_mode": "1",
    "net.ipv4.vs.expire_nodest_conn": "0",
    "net.ipv4.vs.expire_quiescent_template": "0",
    "net.ipv4.conf.all.arp_ignore": "0",
    "net.ipv4.conf.all.arp_announce": "0",
}


class FakeSysctl:
    def __init__(self, values: dict[str, str] | None = None) -> None:
        self.values = dict(values or {})
        # As a container's /proc/sys without privileges: readable, every write refused.
        self.read_only = False

    def get(self, name: str) -> str | None:
        return self.values.get(name)

    def set(self, name: str, value: str) -> None:
        if name not in self.values:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), name)
        if self.read_only:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), name)
        self.values[name] = value
