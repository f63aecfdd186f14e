"""The kernel objects a refusal can hold back (see ``quarantine``), named, described, and
found in the ops that write them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import assert_never

from ipvsproxy.model import (
    AddIPSetEntries,
    AddRealServer,
    AddVirtualServer,
    BindAddress,
    CreateIPSet,
    DeleteIPSetEntries,
    DeleteRealServer,
    DeleteVirtualServer,
    EnsureInterface,
    FlushConntrack,
    PlanOp,
    RealServer,
    RealServerRef,
    ReplaceIPSet,
    RestoreIptables,
    SetIPVSTimeouts,
    SetSysctl,
    UnbindAddress,
    UpdateRealServer,
    UpdateVirtualServer,
    VirtualServer,
    VirtualServerKey,
)


@dataclass(frozen=True, slots=True)
class IPSetMember:
    set_name: str
    entry: str

    def __str__(self) -> str:
        return f"entry {self.entry} of set {self.set_name}"


@dataclass(frozen=True, slots=True)
class Parameter:
    """A kernel parameter (sysctl)."""

    name: str

    def __str__(self) -> str:
        return f"kernel parameter {self.name}"


@dataclass(frozen=True, slots=True)
class Scheduler:
    name: str

    def __str__(self) -> str:
        return f"IPVS scheduler {self.name!r}"


Held = VirtualServerKey | RealServerRef | IPSetMember | Parameter | Scheduler
# What was wanted of a held object when it was refused: a changed wish is tried at once.
Wanted = VirtualServer | RealServer | str | None


def kind_of(obj: Held) -> str:
    """The object's kind, as a metric label."""
    match obj:
        case VirtualServerKey():
            return "virtual_server"
        case RealServerRef():
            return "real_server"
        case IPSetMember():
            return "ipset_entry"
        case Parameter():
            return "sysctl"
    return "scheduler"


def describe_held(obj: Held) -> str:
    match obj:
        case VirtualServerKey():
            return f"virtual server {obj}"
        case RealServerRef():
            return f"real server {obj}"
    return str(obj)


def virtual_server_of(obj: Held) -> VirtualServerKey | None:
    match obj:
        case VirtualServerKey():
            return obj
        case RealServerRef(virtual):
            return virtual
    return None


def quarantinable(op: PlanOp) -> Iterator[tuple[Held, Wanted]]:
    """The objects ``op`` writes that a refusal can quarantine, with what it wants of each.
    Deletions are not among them: they are ours to finish, and a full sync does."""
    match op:
        case AddVirtualServer(server) | UpdateVirtualServer(server):
            yield server.key, server
        case AddRealServer(virtual, server) | UpdateRealServer(virtual, server):
            yield RealServerRef(virtual, server.key), server
        case AddIPSetEntries(name, entries):
            for entry in entries:
                yield IPSetMember(name, entry), None
        case SetSysctl(name, value):
            yield Parameter(name), value
        case (
            DeleteVirtualServer()
            | DeleteRealServer()
            | DeleteIPSetEntries()
            | UnbindAddress()
            | FlushConntrack()
        ):
            pass  # deletions: ours to finish
        case (
            EnsureInterface()
            | BindAddress()
            | CreateIPSet()
            | ReplaceIPSet()
            | RestoreIptables()
            | SetIPVSTimeouts()
        ):
            pass  # not objects a refusal quarantines
        case _:
            assert_never(op)
