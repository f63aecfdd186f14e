"""Kernel parameters under /proc/sys (the in-memory fake is ``kernel.testing.FakeSysctl``).

A module's parameters (/sys/module/MODULE/parameters/NAME) are read and written the same
way, named ``module.MODULE.parameters.NAME``: nf_conntrack's hash size is one, which
kube-proxy sets beside the conntrack sysctls.
"""

from __future__ import annotations

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
