"""Objects the kernel refused, held out of later syncs until their retry is due.

The kernel's refusal of one object (a virtual server whose scheduler module it cannot load, a
real server, an ipset entry, a kernel parameter) says nothing about the rest of the kernel, so
it costs that object alone: the object waits here and is retried with capped, jittered
backoff (at once when what is wanted of it changes), while every other change goes on being
written by incremental syncs. Transient errors, and answers that contradict what the last
sync left, are not refusals (``kernel.errors.error_class``): those still make the next sync a
full one.

A scheduler is tried on the kernel once per name (``try_scheduler``, on a throwaway virtual
server, as ``--ipvs-scheduler`` is at start) and the answer kept: a refused one holds every
virtual server that wants it without asking the kernel again, and is tried anew when its own
retry is due.

An incremental sync cannot trust what it believes of a quarantined virtual server (it is not
what the last sync wanted): it reads those it plans, and plans those whose retry is due.
Kernel parameters are planned by full syncs only, so theirs wait for the next full sync.
Whatever a sync plans nothing for, it found in the kernel as wanted: it leaves quarantine.
Not thread-safe: the reconciler's one thread uses it.
"""

from __future__ import annotations

import enum
import random
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, replace
from types import MappingProxyType

from ipvsproxy.kernel.protocols import ErrorClass, error_class, refusal_reason
from ipvsproxy.model import (
    IPVS_OPS,
    AddIPSetEntries,
    AddVirtualServer,
    DesiredChange,
    DesiredState,
    FlushConntrack,
    IPSetOp,
    IPVSOp,
    OpError,
    PlanOp,
    RealServerRef,
    UpdateVirtualServer,
    VirtualServer,
    VirtualServerKey,
    virtual_of,
)
from ipvsproxy.reconcile.apply import ApplyOutcome, Failure
from ipvsproxy.reconcile.held import (
    Held,
    IPSetMember,
    Parameter,
    Scheduler,
    Wanted,
    kind_of,
    quarantinable,
    virtual_server_of,
)
from ipvsproxy.reconcile.syncplan import SyncPlan


@dataclass(frozen=True, slots=True)
class Backoff:
    """Seconds before a refused object is tried again: ``first``, doubling per attempt up to
    ``cap``, each drawn up to ``jitter`` (a fraction) shorter so that objects refused together
    do not come back together."""

    first: float = 5.0
    cap: float = 300.0
    jitter: float = 0.2

    def delay(self, attempts: int, draw: float) -> float:
        """``draw``: uniform in [0, 1)."""
        base = min(self.cap, self.first * 2.0 ** min(attempts - 1, 32))
        return base * (1.0 - self.jitter * draw)


@dataclass(frozen=True, slots=True)
class Entry:
    wanted: Wanted
    error: OpError
    # Why, as a short bounded name (``refusal_reason``).
    reason: str
    attempts: int
    retry_at: float


class Change(enum.StrEnum):
    QUARANTINED = "quarantined"
    RELEASED = "released"


@dataclass(frozen=True, slots=True)
class Transition:
    """An object entered or left quarantine; ``entry`` as it stood then."""

    object: Held
    change: Change
    entry: Entry
    # Released because the kernel took it (or already had it), not because it is no longer
    # wanted.
    applied: bool = False


@dataclass(frozen=True, slots=True)
class HeldBack:
    plan: SyncPlan
    # Ops not tried because what they write is in quarantine.
    ops: tuple[PlanOp, ...]


# Tries a scheduler on the kernel: None when it takes it, its refusal otherwise.
SchedulerTrial = Callable[[str], OpError | None]


class Quarantine:
    def __init__(
        self,
        backoff: Backoff = Backoff(),
        try_scheduler: SchedulerTrial | None = None,
        accepted_schedulers: Iterable[str] = (),
        draw: Callable[[], float] = random.random,
    ) -> None:
        """Without ``try_scheduler`` every scheduler is taken to exist; ``accepted_schedulers``
        are known to (``--ipvs-scheduler``, tried at start)."""
        self._backoff = backoff
        self._try_scheduler = try_scheduler
        self._accepted = set(accepted_schedulers)
        self._draw = draw
        self._entries: dict[Held, Entry] = {}
        self._transitions: list[Transition] = []

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, obj: object) -> bool:
        return obj in self._entries

    def entries(self) -> MappingProxyType[Held, Entry]:
        return MappingProxyType(self._entries)

    def counts(self) -> Counter[tuple[str, str]]:
        """Objects in quarantine by (kind, reason)."""
        return Counter((kind_of(obj), entry.reason) for obj, entry in self._entries.items())

    def next_retry(self) -> float | None:
        """When the first object an incremental sync would retry is due (None: none is).
        Kernel parameters wait for a full sync, and schedulers for their virtual servers."""
        return min(
            (
                entry.retry_at
                for obj, entry in self._entries.items()
                if not isinstance(obj, Parameter | Scheduler)
            ),
            default=None,
        )

    def take_transitions(self) -> tuple[Transition, ...]:
        """The transitions since the last call."""
        taken, self._transitions = tuple(self._transitions), []
        return taken

    def _holds(self, obj: Held, wanted: Wanted, now: float) -> bool:
        entry = self._entries.get(obj)
        return entry is not None and entry.wanted == wanted and now < entry.retry_at

    def _refuse(
        self,
        obj: Held,
        wanted: Wanted,
        error: OpError,
        *,
        reason: str,
        now: float,
        retry_at: float | None = None,
    ) -> None:
        before = self._entries.get(obj)
        attempts = 1 if before is None else before.attempts + 1
        if retry_at is None:
            retry_at = now + self._backoff.delay(attempts, self._draw())
        entry = Entry(wanted, error, reason, attempts, retry_at)
        self._entries[obj] = entry
        if before is None:
            self._transitions.append(Transition(obj, Change.QUARANTINED, entry))

    def _release(self, obj: Held, *, applied: bool) -> None:
        entry = self._entries.pop(obj, None)
        if entry is not None:
            self._transitions.append(Transition(obj, Change.RELEASED, entry, applied))

    # -- before a sync plans ----------------------------------------------------------------

    def to_read(self, change: DesiredChange, now: float) -> frozenset[VirtualServerKey]:
        """The quarantined virtual servers an incremental sync must read and plan: those the
        change touches (what it believes of them is wrong) and those due for a retry."""
        keys: set[VirtualServerKey] = set()
        for obj, entry in self._entries.items():
            key = virtual_server_of(obj)
            if key is not None and (now >= entry.retry_at or key in change.virtual_servers):
                keys.add(key)
        return frozenset(keys)

    def with_entries(self, change: DesiredChange, now: float) -> DesiredChange:
        """``change`` with the quarantined ipset entries due for a retry added, and those it
        removes left out (the kernel never had them)."""
        members = [
            (obj, entry) for obj, entry in self._entries.items() if isinstance(obj, IPSetMember)
        ]
        if not members:
            return change
        added = {name: set(entries) for name, entries in change.added_entries.items()}
        removed = {name: set(entries) for name, entries in change.removed_entries.items()}
        for member, entry in members:
            if member.entry in removed.get(member.set_name, ()):
                removed[member.set_name].discard(member.entry)
            elif now >= entry.retry_at:
                added.setdefault(member.set_name, set()).add(member.entry)
        return replace(
            change,
            added_entries=MappingProxyType(
                {name: frozenset(entries) for name, entries in added.items() if entries}
            ),
            removed_entries=MappingProxyType(
                {name: frozenset(entries) for name, entries in removed.items() if entries}
            ),
        )

    # -- between planning and applying -------------------------------------------------------

    def hold_back(
        self, plan: SyncPlan, now: float, planned: Collection[VirtualServerKey] | None = None
    ) -> HeldBack:
        """``plan`` without the ops on quarantined objects not yet due (and on virtual servers
        whose scheduler is refused). ``planned``: the virtual servers an incremental sync
        planned from the kernel (None: a full sync, which planned everything from it); a
        quarantined object among them that the plan does not write is in the kernel as
        wanted, and released."""
        held_virtual = {
            op.server.key
            for op in plan.ipvs.changes
            if isinstance(op, AddVirtualServer | UpdateVirtualServer)
            and self._held_server(op.server, now)
        }
        if not self._entries:
            return HeldBack(plan, ())
        self._release_unplanned(plan, planned)
        held: list[PlanOp] = []

        def kept(op: IPVSOp | FlushConntrack) -> bool:
            virtual = op.virtual if isinstance(op, FlushConntrack) else virtual_of(op)
            if virtual in held_virtual or any(
                self._holds(obj, wanted, now) for obj, wanted in quarantinable(op)
            ):
                held.append(op)
                return False
            return True

        ipvs = plan.ipvs
        ipvs = replace(
            ipvs,
            changes=tuple(op for op in ipvs.changes if kept(op)),
            removals=tuple(op for op in ipvs.removals if kept(op)),
            flushes=tuple(op for op in ipvs.flushes if kept(op)),
            draining=tuple(d for d in ipvs.draining if d.ref.virtual not in held_virtual),
        )
        sysctls = []
        for sysctl in plan.sysctls:
            if self._holds(Parameter(sysctl.name), sysctl.value, now):
                held.append(sysctl)
            else:
                sysctls.append(sysctl)
        ipsets = [*self._ipsets_held(plan.ipsets, now, held)]
        return HeldBack(
            replace(plan, sysctls=tuple(sysctls), ipsets=tuple(ipsets), ipvs=ipvs), tuple(held)
        )

    def _ipsets_held(
        self, ops: Iterable[IPSetOp], now: float, held: list[PlanOp]
    ) -> Iterator[IPSetOp]:
        for op in ops:
            if not isinstance(op, AddIPSetEntries):
                yield op
                continue
            waiting = tuple(
                e for e in op.entries if self._holds(IPSetMember(op.name, e), None, now)
            )
            if not waiting:
                yield op
                continue
            held.append(replace(op, entries=waiting))
            if rest := tuple(e for e in op.entries if e not in waiting):
                yield replace(op, entries=rest)

    def _held_server(self, server: VirtualServer, now: float) -> bool:
        """Whether the virtual server waits: itself in quarantine and not due, or its
        scheduler refused (tried here once per name, and again when due)."""
        if self._holds(server.key, server, now):
            return True
        if self._try_scheduler is None or server.scheduler in self._accepted:
            return False
        scheduler = Scheduler(server.scheduler)
        if not self._holds(scheduler, None, now):
            error = self._try_scheduler(server.scheduler)
            if error is None:
                self._accepted.add(server.scheduler)
                self._release(scheduler, applied=True)
                return False
            stands_for = AddVirtualServer(server)
            if error_class(stands_for, error) is not ErrorClass.REFUSED:
                return False  # the trial told nothing; the op itself will
            reason = refusal_reason(stands_for, error)
            self._refuse(scheduler, None, error, reason=reason, now=now)
        refused = self._entries[scheduler]
        self._refuse(
            server.key,
            server,
            refused.error,
            reason=refused.reason,
            now=now,
            retry_at=refused.retry_at,
        )
        return True

    def _release_unplanned(
        self, plan: SyncPlan, planned: Collection[VirtualServerKey] | None
    ) -> None:
        written = {
            obj
            for op in (*plan.sysctls, *plan.ipsets, *plan.ipvs.changes)
            for obj, _ in quarantinable(op)
            if obj in self._entries
        }
        for obj in list(self._entries):
            if obj in written or isinstance(obj, Scheduler):
                continue
            if planned is None or virtual_server_of(obj) in planned:
                self._release(obj, applied=True)

    # -- after applying ---------------------------------------------------------------------

    def take_outcome(self, outcome: ApplyOutcome, now: float) -> list[Failure]:
        """Quarantine what the kernel refused and release what it took; the failures that are
        no refusal of one object (for a full sync to deal with)."""
        others: list[Failure] = []
        refused: set[Held] = set()
        # A virtual server the kernel refused fails its real servers' ops too (ESRCH): those
        # wait with it, and are no sign of a kernel out of step.
        refused_virtual = {
            failure.op.server.key
            for failure in outcome.failures
            if isinstance(failure.op, AddVirtualServer | UpdateVirtualServer)
            and error_class(failure.op, failure.error) is ErrorClass.REFUSED
        }
        for failure in outcome.failures:
            if (
                isinstance(failure.op, IPVS_OPS)
                and not isinstance(failure.op, AddVirtualServer | UpdateVirtualServer)
                and virtual_of(failure.op) in refused_virtual
            ):
                continue
            objects = list(quarantinable(failure.op))
            if not objects or error_class(failure.op, failure.error) is not ErrorClass.REFUSED:
                others.append(failure)
                continue
            reason = refusal_reason(failure.op, failure.error)
            for obj, wanted in objects:
                self._refuse(obj, wanted, failure.error, reason=reason, now=now)
                refused.add(obj)
        if self._entries:
            for op in outcome.applied:
                for obj, _ in quarantinable(op):
                    if obj not in refused:
                        self._release(obj, applied=True)
            self._forget_unused_schedulers()
        return others

    def virtual_servers(self) -> frozenset[VirtualServerKey]:
        """The virtual servers held, or with real servers held."""
        return frozenset(key for key in map(virtual_server_of, self._entries) if key is not None)

    def sweep(self, desired: DesiredState) -> None:
        """Release what ``desired`` no longer wants."""
        for obj in list(self._entries):
            match obj:
                case VirtualServerKey():
                    gone = obj not in desired.virtual_servers
                case RealServerRef(virtual, real):
                    wanted = desired.virtual_servers.get(virtual)
                    gone = wanted is None or real not in wanted.real_servers
                case IPSetMember(name, member):
                    content = desired.ipsets.get(name)
                    gone = content is None or member not in content.entries
                case _:
                    gone = False
            if gone:
                self._release(obj, applied=False)
        self._forget_unused_schedulers()

    def _forget_unused_schedulers(self) -> None:
        """A refused scheduler is remembered while a held virtual server wants it."""
        wanted = {
            entry.wanted.scheduler
            for entry in self._entries.values()
            if isinstance(entry.wanted, VirtualServer)
        }
        for obj in list(self._entries):
            if isinstance(obj, Scheduler) and obj.name not in wanted:
                self._release(obj, applied=False)
