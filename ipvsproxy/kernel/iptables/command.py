"""iptables-save and iptables-restore as subprocesses: their names per backend and family,
and their refusals in one line."""

from __future__ import annotations

import re
import shutil
import subprocess

from ipvsproxy.kernel.errors import IptablesError
from ipvsproxy.model import IPFamily

# The xtables lock, as kube-proxy takes it: wait a bounded time, so a stuck holder costs one
# failed sync (retried) rather than a hung proxy.
RESTORE_WAIT = "--wait=5"
_FAILED_LINE = re.compile(r"line:? (\d+)")


def binary(backend: str, family: IPFamily, tool: str) -> str:
    """``tool`` is "save" or "restore"."""
    prefix = "iptables" if family is IPFamily.IPV4 else "ip6tables"
    return f"{prefix}-{backend}-{tool}"


def _located(command: list[str]) -> list[str]:
    # By its absolute path: given a bare name, the child searches PATH with one execve per
    # folder, which from a big process cost 1.4-2.3 s a spawn in the lab (0.2-0.5 s by path).
    path = shutil.which(command[0])
    if path is None:
        raise IptablesError(f"{command[0]} is not installed (install the iptables package)")
    return [path, *command[1:]]


class Started:
    """A command without input, started now and its output taken later (``output``): its
    run overlaps whatever the caller does meanwhile."""

    def __init__(self, command: list[str]) -> None:
        self._name = command[0]
        self._process = subprocess.Popen(
            _located(command),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def output(self) -> str:
        """Its standard output, once it has ended; IptablesError as ``run`` raises it."""
        stdout, stderr = self._process.communicate()
        if self._process.returncode != 0:
            raise IptablesError(f"{self._name} failed: {refusal(stderr, '')}")
        return stdout

    def discard(self) -> None:
        """Not wanted after all: stopped if still running, and reaped."""
        self._process.kill()
        self._process.communicate()


def run(command: list[str], text: str = "", timeout: float | None = None) -> str:
    path, *arguments = _located(command)
    try:
        done = subprocess.run(
            [path, *arguments],
            input=text,
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise IptablesError(f"{command[0]} did not finish in {timeout} s") from None
    if done.returncode != 0:
        raise IptablesError(f"{command[0]} failed: {refusal(done.stderr, text)}")
    return done.stdout


def refusal(stderr: str, text: str) -> str:
    """iptables' complaint in one line, with the input line it names."""
    said = [line.strip() for line in stderr.splitlines() if line.strip()]
    said = [line for line in said if not line.startswith("Try `")] or ["no message"]
    found = _FAILED_LINE.search(stderr)
    inputs = text.splitlines()
    if found and 0 < int(found.group(1)) <= len(inputs):
        said.append(f"input: {inputs[int(found.group(1)) - 1]}")
    return "; ".join(said)
