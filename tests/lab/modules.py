"""Kernel modules inside the lab: which are loaded, and unloading one with what holds it."""

from __future__ import annotations

from pathlib import Path

from tests.lab.netns import sh


def loaded(module: str) -> bool:
    return Path("/sys/module", module).exists()


def delete_virtual_servers(scheduler: str | None = None) -> None:
    """Delete the virtual servers (those with ``scheduler``, or all) that hold IPVS modules."""
    for line in sh("ipvsadm", "-Sn").splitlines():
        words = line.split()
        if words[:1] == ["-A"] and (scheduler is None or words[words.index("-s") + 1] == scheduler):
            sh("ipvsadm", "-D", *words[1:3])


def _users(module: str) -> list[str]:
    """The modules that use ``module``, from /proc/modules ("name size count users state")."""
    for line in Path("/proc/modules").read_text().splitlines():
        name, _size, _count, users, *_ = line.split()
        if name == module:
            return [user for user in users.split(",") if user and user != "-"]
    return []


def unload(module: str) -> None:
    """Unload ``module`` after the modules that hold it (xt_ipvs holds ip_vs, say)."""
    if not loaded(module):
        return
    for holder in _users(module):
        unload(holder)
    sh("rmmod", module)
    assert not loaded(module), f"{module} is still loaded"
