"""Debian packages the tests need, installed when a command is missing (as root, with apt).

One helper for every caller: the nox sessions (``python -m tests.packages COMMAND=PACKAGE ...``)
and the lab runner. A fresh machine may never have run ``apt-get update`` (the install then
finds nothing), and another apt may hold the dpkg lock (it is waited for, not failed on).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping

# Waits for another apt or dpkg instead of failing at once with status 100.
LOCK_TIMEOUT = ("-o", "DPkg::Lock::Timeout=600")


def missing(commands: Mapping[str, str]) -> list[str]:
    """The packages of the commands (command -> package) not on PATH."""
    return sorted({package for command, package in commands.items() if not shutil.which(command)})


def ensure(commands: Mapping[str, str]) -> str | None:
    """Install the packages of the missing commands; why they are still missing, or None."""
    packages = missing(commands)
    if not packages:
        return None
    if os.geteuid() != 0:
        return f"{', '.join(packages)} missing; run as root to install them with apt"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    print(f"packages: installing {' '.join(packages)}", flush=True)
    for command in (
        ["apt-get", *LOCK_TIMEOUT, "update", "-q"],
        ["apt-get", *LOCK_TIMEOUT, "install", "-y", "-q", "--no-install-recommends", *packages],
    ):
        done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, check=False)
        if done.returncode != 0:
            return f"{' '.join(command[:1] + command[3:4])} failed with status {done.returncode}"
    still = [command for command in commands if shutil.which(command) is None]
    return f"still missing after apt-get install: {', '.join(still)}" if still else None


def main(args: list[str]) -> int:
    commands = {}
    for arg in args:
        command, _, package = arg.partition("=")
        commands[command] = package or command
    reason = ensure(commands)
    if reason:
        print(f"packages: {reason}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
