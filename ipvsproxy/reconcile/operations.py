"""The typed operations a sync plan holds beyond the IPVS and address ops of ``model``."""

from __future__ import annotations

from dataclasses import dataclass

from ipvsproxy.model import (
    AddRealServer,
    AddressOp,
    AddVirtualServer,
    DeleteRealServer,
    DeleteVirtualServer,
    IPSetSpec,
    IptablesRuleset,
    IPVSOp,
    RealServerKey,
    SetIPVSTimeouts,
    SetSysctl,
    UpdateRealServer,
    UpdateVirtualServer,
    VirtualServerKey,
)

DUMMY_INTERFACE = "kube-ipvs0"


@dataclass(frozen=True, slots=True)
class RealServerRef:
    """One real server of one virtual server: the unit graceful termination works on."""

    virtual: VirtualServerKey
    real: RealServerKey

    def __str__(self) -> str:
        return f"{self.real} on {self.virtual}"


@dataclass(frozen=True, slots=True)
class EnsureInterface:
    name: str


@dataclass(frozen=True, slots=True)
class CreateIPSet:
    spec: IPSetSpec


@dataclass(frozen=True, slots=True)
class AddIPSetEntries:
    name: str
    entries: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DeleteIPSetEntries:
    name: str
    entries: tuple[str, ...]


IPSetOp = CreateIPSet | AddIPSetEntries | DeleteIPSetEntries


@dataclass(frozen=True, slots=True)
class RestoreIptables:
    """Written only when the kernel's chains differ; the kernel layer decides."""

    ruleset: IptablesRuleset


@dataclass(frozen=True, slots=True)
class FlushConntrack:
    """Forget the flows to ``virtual`` NATed to ``real``, so UDP/SCTP clients pick a live one."""

    virtual: VirtualServerKey
    real: RealServerKey


PlanOp = (
    SetSysctl
    | EnsureInterface
    | AddressOp
    | IPSetOp
    | RestoreIptables
    | SetIPVSTimeouts
    | IPVSOp
    | FlushConntrack
)


def virtual_of(op: IPVSOp) -> VirtualServerKey:
    """The virtual server an IPVS op writes, or whose real server it writes."""
    match op:
        case AddVirtualServer(server) | UpdateVirtualServer(server):
            return server.key
        case DeleteVirtualServer(key):
            return key
        case AddRealServer(virtual) | UpdateRealServer(virtual) | DeleteRealServer(virtual):
            return virtual
    raise TypeError(f"not an IPVS op: {op!r}")
