"""iptables-save and iptables-restore as subprocesses, on the backend the node already uses.

The backend is chosen as kubernetes-sigs/iptables-wrappers chooses it, so we write into the
same tables as kubelet: the flavour holding kubelet's hint chains, else the one holding more
rules, else nft. A flavour that cannot write a nat chain is never chosen: with nf_tables
loaded but no nft nat support (the lab kernel), iptables-nft-save works and every
iptables-nft-restore fails.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

from ipvsproxy.kernel.errors import IptablesError
from ipvsproxy.model import IPFamily

BACKENDS = ("nft", "legacy")
HINT_CHAINS = (":KUBE-IPTABLES-HINT ", ":KUBE-KUBELET-CANARY ")
PROBE_TIMEOUT_SECONDS = 10
PROBE_CHAIN = "IPVSPROXY-PROBE"
# The xtables lock, as kube-proxy takes it: wait a bounded time, so a stuck holder costs one
# failed sync (retried) rather than a hung proxy.
RESTORE_WAIT = "--wait=5"
_FAILED_LINE = re.compile(r"line:? (\d+)")


@dataclass(frozen=True, slots=True)
class Probe:
    """What one backend's iptables-save showed over both families, or why it cannot be used."""

    unusable: str = ""
    hint_chains: int = 0
    rule_lines: int = 0


def probe_of(saved: list[str]) -> Probe:
    """``saved``: the save output of each family that could be read."""
    lines = [line for text in saved for line in text.splitlines()]
    return Probe(
        hint_chains=sum(line.startswith(HINT_CHAINS) for line in lines),
        rule_lines=sum(line.startswith("-") for line in lines),
    )


def choose_backend(probes: Mapping[str, Probe]) -> str:
    working = [backend for backend in BACKENDS if not probes[backend].unusable]
    if not working:
        reasons = "; ".join(f"{backend}: {probes[backend].unusable}" for backend in BACKENDS)
        raise IptablesError(f"no iptables backend can write the nat table ({reasons})")
    hinted = [backend for backend in working if probes[backend].hint_chains]
    if hinted:
        return hinted[0]
    if len(working) == len(BACKENDS) and probes["legacy"].rule_lines > probes["nft"].rule_lines:
        return "legacy"
    return working[0]


def binary(backend: str, family: IPFamily, tool: str) -> str:
    """``tool`` is "save" or "restore"."""
    prefix = "iptables" if family is IPFamily.IPV4 else "ip6tables"
    return f"{prefix}-{backend}-{tool}"


def _run(command: list[str], text: str = "", timeout: float | None = None) -> str:
    try:
        done = subprocess.run(
            command, input=text, capture_output=True, text=True, check=False, timeout=timeout
        )
    except FileNotFoundError:
        raise IptablesError(
            f"{command[0]} is not installed (install the iptables package)"
        ) from None
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


def _probe(backend: str) -> Probe:
    """A save, then a chain created and deleted in one commit: nothing stays, but the nat table
    must be writable (nf_tables without nft nat support saves fine and writes nothing)."""
    try:
        saved = [_run([binary(backend, IPFamily.IPV4, "save")], timeout=PROBE_TIMEOUT_SECONDS)]
        _run(
            [binary(backend, IPFamily.IPV4, "restore"), "--noflush", RESTORE_WAIT],
            f"*nat\n:{PROBE_CHAIN} - [0:0]\n-X {PROBE_CHAIN}\nCOMMIT\n",
            timeout=PROBE_TIMEOUT_SECONDS,
        )
    except IptablesError as error:
        return Probe(unusable=str(error))
    # A node without IPv6 has no ip6tables tables; that does not make the backend unusable.
    with contextlib.suppress(IptablesError):
        saved.append(_run([binary(backend, IPFamily.IPV6, "save")], timeout=PROBE_TIMEOUT_SECONDS))
    return probe_of(saved)


def detect_backend() -> str:
    return choose_backend({backend: _probe(backend) for backend in BACKENDS})


class CommandNetfilter:
    def __init__(self, backend: str | None = None) -> None:
        self._backend = backend

    @property
    def backend(self) -> str:
        if self._backend is None:
            self._backend = detect_backend()
        return self._backend

    def save(self, family: IPFamily) -> str:
        return _run([binary(self.backend, family, "save")])

    def restore(self, family: IPFamily, text: str) -> None:
        _run([binary(self.backend, family, "restore"), "--noflush", RESTORE_WAIT], text)
