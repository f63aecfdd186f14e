"""Which iptables backend (legacy or nft) to drive: the one the node already uses.

The backend is chosen as kubernetes-sigs/iptables-wrappers chooses it, so we write into the
same tables as kubelet: the flavour holding kubelet's hint chains, else the one holding more
rules, else nft. A flavour that cannot write a nat chain is never chosen: with nf_tables
loaded but no nft nat support (the lab kernel), iptables-nft-save works and every
iptables-nft-restore fails.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ipvsproxy.kernel.errors import IptablesError
from ipvsproxy.kernel.iptables.command import RESTORE_WAIT, binary, run
from ipvsproxy.model import IPFamily

BACKENDS = ("nft", "legacy")
HINT_CHAINS = (":KUBE-IPTABLES-HINT ", ":KUBE-KUBELET-CANARY ")
PROBE_TIMEOUT_SECONDS = 10
PROBE_CHAIN = "IPVSPROXY-PROBE"


@dataclass(frozen=True, slots=True)
class Probe:
    """What one backend's iptables-save showed over both families, or why it cannot be used."""

    unusable: str = ""
    hint_chains: int = 0
    rule_lines: int = 0
    # What iptables-save printed, by family, for whoever reads the tables next.
    saved: Mapping[IPFamily, str] = field(
        default_factory=lambda: MappingProxyType({}), compare=False
    )


@dataclass(frozen=True, slots=True)
class Detected:
    backend: str
    # The chosen backend's tables as its probe saved them, a moment ago: the sync that asked
    # for the backend reads these rather than start iptables-save again (two processes less
    # per `sync --once`). The probe's own chain came and went in one commit, so they hold.
    saved: Mapping[IPFamily, str]


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


def probe(backend: str) -> Probe:
    """A save, then a chain created and deleted in one commit: nothing stays, but the nat table
    must be writable (nf_tables without nft nat support saves fine and writes nothing)."""
    try:
        saved = {
            IPFamily.IPV4: run(
                [binary(backend, IPFamily.IPV4, "save")], timeout=PROBE_TIMEOUT_SECONDS
            )
        }
        run(
            [binary(backend, IPFamily.IPV4, "restore"), "--noflush", RESTORE_WAIT],
            f"*nat\n:{PROBE_CHAIN} - [0:0]\n-X {PROBE_CHAIN}\nCOMMIT\n",
            timeout=PROBE_TIMEOUT_SECONDS,
        )
    except IptablesError as error:
        return Probe(unusable=str(error))
    # A node without IPv6 has no ip6tables tables; that does not make the backend unusable.
    with contextlib.suppress(IptablesError):
        saved[IPFamily.IPV6] = run(
            [binary(backend, IPFamily.IPV6, "save")], timeout=PROBE_TIMEOUT_SECONDS
        )
    found = probe_of(list(saved.values()))
    return Probe(
        hint_chains=found.hint_chains, rule_lines=found.rule_lines, saved=MappingProxyType(saved)
    )


def detect() -> Detected:
    probes = {backend: probe(backend) for backend in BACKENDS}
    backend = choose_backend(probes)
    return Detected(backend, probes[backend].saved)


def detect_backend() -> str:
    return detect().backend
