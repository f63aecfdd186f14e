"""Which iptables backend (legacy or nft) to drive: the one the node already uses.

The backend is chosen as kubernetes-sigs/iptables-wrappers chooses it, so we write into the
same tables as kubelet: the flavour holding kubelet's hint chains, else the one holding more
rules, else nft. A flavour that cannot write a nat chain is never chosen: with nf_tables
loaded but no nft nat support (the lab kernel), iptables-nft-save works and every
iptables-nft-restore fails.

Each save and each write probe is a process (0.1 s apiece in the lab, before every `sync
--once`), so the choice asks for each only when its answer can change the outcome: a flavour
kubelet hinted in IPv4 is chosen without looking at the other, and a flavour whose nat table
already holds a chain someone created has shown that it writes nat without being probed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

from ipvsproxy.kernel.errors import IptablesError
from ipvsproxy.kernel.iptables.command import RESTORE_WAIT, binary, run
from ipvsproxy.model import IPFamily

BACKENDS = ("nft", "legacy")
HINT_CHAINS = (":KUBE-IPTABLES-HINT ", ":KUBE-KUBELET-CANARY ")
PROBE_TIMEOUT_SECONDS = 10
PROBE_CHAIN = "IPVSPROXY-PROBE"
_BUILTIN_NAT_CHAINS = frozenset({"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"})


class Flavours(Protocol):
    """What the choice asks of each backend; each answer is worked out at most once."""

    def saved(self, backend: str, family: IPFamily) -> str | None:
        """What ``backend``'s save of ``family`` printed; None when it could not be read."""
        ...

    def unreadable(self, backend: str) -> str:
        """Why ``backend``'s IPv4 tables cannot be read ("" when they can)."""
        ...

    def unwritable(self, backend: str) -> str:
        """Why ``backend`` cannot write a nat chain ("" when it can)."""
        ...


@dataclass(frozen=True, slots=True)
class Detected:
    backend: str
    # The chosen backend's tables as the choice saved them, a moment ago: the sync that asked
    # for the backend reads these rather than start iptables-save again. A write probe's own
    # chain came and went in one commit, so they hold.
    saved: Mapping[IPFamily, str]


def hint_chains(saved: Iterable[str]) -> int:
    return sum(line.startswith(HINT_CHAINS) for text in saved for line in text.splitlines())


def rule_lines(saved: Iterable[str]) -> int:
    return sum(line.startswith("-") for text in saved for line in text.splitlines())


def holds_created_nat_chain(saved: str) -> bool:
    """Whether a save shows a nat chain someone created: its flavour has written nat."""
    in_nat = False
    for line in saved.splitlines():
        if line.startswith("*"):
            in_nat = line == "*nat"
        elif (
            in_nat and line.startswith(":") and line[1:].split(" ", 1)[0] not in _BUILTIN_NAT_CHAINS
        ):
            return True
    return False


def _families(flavours: Flavours, backend: str) -> Iterable[str]:
    """Each family's save in turn, IPv6's only once asked for."""
    for family in IPFamily:
        text = flavours.saved(backend, family)
        if text is not None:
            yield text


def _hinted(flavours: Flavours, backend: str) -> bool:
    return any(hint_chains([text]) for text in _families(flavours, backend))


def _usable(flavours: Flavours, backend: str) -> bool:
    return not flavours.unreadable(backend) and not flavours.unwritable(backend)


def choose_backend(flavours: Flavours) -> str:
    for backend in BACKENDS:
        # Hinted first: an unhinted flavour is not probed for writes here (and an unreadable
        # one shows no hint).
        if _hinted(flavours, backend) and _usable(flavours, backend):
            return backend
    # Unreadable, a flavour counts no rules.
    more = [rule_lines(_families(flavours, backend)) for backend in BACKENDS]
    # With more rules, legacy is chosen whether nft writes or not: nft is not probed for it.
    if more[1] > more[0] and _usable(flavours, "legacy"):
        return "legacy"
    for backend in BACKENDS:
        if _usable(flavours, backend):
            return backend
    reasons = "; ".join(
        f"{backend}: {flavours.unreadable(backend) or flavours.unwritable(backend)}"
        for backend in BACKENDS
    )
    raise IptablesError(f"no iptables backend can write the nat table ({reasons})")


class CommandFlavours:
    """Each backend's saves and its write probe as commands, each run once when first asked."""

    def __init__(self) -> None:
        self._saves: dict[tuple[str, IPFamily], str | IptablesError] = {}
        self._writes: dict[str, str] = {}

    def _save(self, backend: str, family: IPFamily) -> str | IptablesError:
        key = (backend, family)
        if key not in self._saves:
            try:
                command = [binary(backend, family, "save")]
                self._saves[key] = run(command, timeout=PROBE_TIMEOUT_SECONDS)
            except IptablesError as error:
                self._saves[key] = error
        return self._saves[key]

    def saved(self, backend: str, family: IPFamily) -> str | None:
        if family is not IPFamily.IPV4 and self.unreadable(backend):
            return None
        # A node without IPv6 has no ip6tables tables; that does not make the backend unusable.
        text = self._save(backend, family)
        return None if isinstance(text, IptablesError) else text

    def unreadable(self, backend: str) -> str:
        text = self._save(backend, IPFamily.IPV4)
        return str(text) if isinstance(text, IptablesError) else ""

    def unwritable(self, backend: str) -> str:
        if backend not in self._writes:
            self._writes[backend] = self._probe_write(backend)
        return self._writes[backend]

    def _probe_write(self, backend: str) -> str:
        """A chain created and deleted in one commit: nothing stays, but the nat table must be
        writable (nf_tables without nft nat support saves fine and writes nothing)."""
        saved = self.saved(backend, IPFamily.IPV4)
        if saved is not None and holds_created_nat_chain(saved):
            return ""
        try:
            run(
                [binary(backend, IPFamily.IPV4, "restore"), "--noflush", RESTORE_WAIT],
                f"*nat\n:{PROBE_CHAIN} - [0:0]\n-X {PROBE_CHAIN}\nCOMMIT\n",
                timeout=PROBE_TIMEOUT_SECONDS,
            )
        except IptablesError as error:
            return str(error)
        return ""

    def read(self, backend: str) -> Mapping[IPFamily, str]:
        """What was saved of ``backend`` so far, by family."""
        return MappingProxyType(
            {
                family: text
                for (which, family), text in self._saves.items()
                if which == backend and not isinstance(text, IptablesError)
            }
        )


def detect() -> Detected:
    flavours = CommandFlavours()
    backend = choose_backend(flavours)
    return Detected(backend, flavours.read(backend))


def detect_backend() -> str:
    return detect().backend
