"""The lab kernel's proxy state read with the standard tools, as an operator would see it."""

from __future__ import annotations

import shutil
import subprocess

from tests.lab.netns import sh

SAVE_COMMANDS = (
    "iptables-legacy-save",
    "ip6tables-legacy-save",
    "iptables-nft-save",
    "ip6tables-nft-save",
)


def ipvs_table() -> set[str]:
    """``ipvsadm -Sn``: one line per virtual and real server, without counters."""
    return set(sh("ipvsadm", "-Sn").splitlines())


def virtual_servers() -> set[str]:
    return {line for line in ipvs_table() if line.startswith("-A ")}


def weights(protocol_flag: str, virtual: str) -> dict[str, int]:
    """real server -> weight on one virtual server (``-t``/``-u``, ``address:port``)."""
    found = {}
    for line in ipvs_table():
        words = line.split()
        if words[:3] == ["-a", protocol_flag, virtual]:
            found[words[words.index("-r") + 1]] = int(words[words.index("-w") + 1])
    return found


def link_addresses(interface: str) -> set[str] | None:
    """The addresses on ``interface`` (None when there is no such link)."""
    done = subprocess.run(
        ["ip", "-o", "addr", "show", "dev", interface], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        return None
    return {line.split()[3] for line in done.stdout.splitlines()}


def kube_chains() -> set[str]:
    """Every KUBE-* chain in every iptables backend and family that can be read here."""
    chains = set()
    for command in filter(shutil.which, SAVE_COMMANDS):
        done = subprocess.run([command], capture_output=True, text=True, check=False)
        chains |= {
            f"{command}: {line.split()[0][1:]}"
            for line in done.stdout.splitlines()
            if line.startswith(":KUBE-")
        }
    return chains


def kube_ipsets() -> set[str]:
    return {name for name in sh("ipset", "list", "-n").split() if name.startswith("KUBE-")}
