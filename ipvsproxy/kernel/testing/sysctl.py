"""An in-memory /proc/sys that behaves as ``ProcSysctl`` does."""

from __future__ import annotations

import errno
import os

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
