"""Apply a SyncPlan stage by stage; a refused op is recorded and the rest still applies."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import assert_never

from ipvsproxy.kernel.protocols import KERNEL_ERRORS, Kernel, refusal
from ipvsproxy.model import (
    IPVS_OPS,
    AddIPSetEntries,
    BatchResult,
    CreateIPSet,
    DeleteIPSetEntries,
    DeleteRealServer,
    DeleteVirtualServer,
    EnsureInterface,
    FlushConntrack,
    IPSetOp,
    IPVSOp,
    OpError,
    PlanOp,
    ReplaceIPSet,
    RestoreIptables,
    VirtualServerKey,
    virtual_of,
)
from ipvsproxy.reconcile.describe import describe
from ipvsproxy.reconcile.syncplan import SyncPlan

# Told (IPVS operations done, of how many) as a sync's IPVS changes go to the kernel.
Progress = Callable[[int, int], None]
# How many IPVS changes go to the kernel between two reports of progress.
PROGRESS_STEP = 1000


@dataclass(frozen=True, slots=True)
class Failure:
    op: PlanOp
    error: OpError

    def __str__(self) -> str:
        return f"{describe(self.op)}: {self.error.message}"


@dataclass(frozen=True, slots=True)
class ApplyOutcome:
    # The ops that changed the kernel (an iptables restore that found nothing to change did not).
    applied: tuple[PlanOp, ...]
    failures: tuple[Failure, ...]
    # Ops not tried because an earlier one they depend on failed; planned again next sync.
    held_back: tuple[PlanOp, ...]
    writes: int


@dataclass
class _Applier:
    kernel: Kernel
    applied: list[PlanOp] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    held_back: list[PlanOp] = field(default_factory=list)
    writes: int = 0

    def record(self, op: PlanOp, error: OpError | None, *, wrote: bool = True) -> None:
        if error is not None:
            self.failures.append(Failure(op, error))
            return
        if wrote:
            self.applied.append(op)
            self.writes += 1

    def batch(self, ops: Sequence[PlanOp], results: BatchResult) -> None:
        for op, error in zip(ops, results, strict=True):
            self.record(op, error)

    def call(self, op: PlanOp, write: Callable[[], object]) -> None:
        """Run one unbatched kernel call; its refusal becomes this op's failure."""
        try:
            outcome = write()
        except KERNEL_ERRORS as error:
            self.record(op, refusal(error))
        else:
            self.record(op, None, wrote=outcome is not False)

    def ipset(self, op: IPSetOp) -> None:
        ipsets = self.kernel.ipsets
        match op:
            case CreateIPSet(spec):
                self.call(op, lambda: ipsets.create(spec))
            case AddIPSetEntries(name, entries):
                self._entries(op, entries, ipsets.add(name, entries))
            case DeleteIPSetEntries(name, entries):
                self._entries(op, entries, ipsets.delete(name, entries))
            case ReplaceIPSet(content):
                self.call(op, lambda: ipsets.replace(content))
            case _:
                assert_never(op)

    def _entries(
        self,
        op: AddIPSetEntries | DeleteIPSetEntries,
        entries: tuple[str, ...],
        results: BatchResult,
    ) -> None:
        """Entries succeed or fail one by one; refusals are reported grouped by reason."""
        refused: dict[OpError, list[str]] = {}
        for entry, error in zip(entries, results, strict=True):
            if error is not None:
                refused.setdefault(error, []).append(entry)
        for error, group in refused.items():
            self.failures.append(Failure(replace(op, entries=tuple(group)), error))
        done = len(entries) - sum(map(len, refused.values()))
        if done:
            self.applied.append(op)
            self.writes += done

    def ipvs(self, ops: Sequence[IPVSOp]) -> None:
        if ops:
            self.batch(ops, self.kernel.ipvs.apply(ops))

    def failed_virtual_servers(self) -> set[VirtualServerKey]:
        return {virtual_of(f.op) for f in self.failures if isinstance(f.op, IPVS_OPS)}


def apply_plan(kernel: Kernel, plan: SyncPlan, progress: Progress | None = None) -> ApplyOutcome:
    """Apply in the plan's order; removals wait for the changes they follow to succeed.

    A real server is never drained or deleted on a virtual server whose additions failed in
    this sync (it may be all that still serves), and an address is never unbound while a
    virtual server on it could not be deleted (it would stop being ours, and leak).
    ``progress`` is told after each ``PROGRESS_STEP`` of the IPVS changes, the bulk of a
    first sync (121,000 at 10,000 services).
    """
    run = _Applier(kernel)
    for sysctl in plan.sysctls:
        run.call(sysctl, partial(kernel.sysctl.set, sysctl.name, sysctl.value))
    if plan.create_interface:
        run.call(
            EnsureInterface(plan.interface),
            lambda: kernel.addresses.ensure_interface(plan.interface),
        )
    if plan.bind:
        run.batch(plan.bind, kernel.addresses.apply(plan.interface, plan.bind))
    for op in plan.ipsets:
        run.ipset(op)
    for ruleset in plan.iptables:
        run.call(RestoreIptables(ruleset), partial(kernel.iptables.restore, ruleset))
    for timeouts in plan.timeouts:
        run.call(timeouts, partial(kernel.ipvs.set_timeouts, timeouts.timeouts))
    _ipvs_changes(run, plan.ipvs.changes, progress)
    _remove(run, plan)
    _flush_deleted(run, plan)
    _unbind(run, plan)
    return ApplyOutcome(tuple(run.applied), tuple(run.failures), tuple(run.held_back), run.writes)


def _ipvs_changes(run: _Applier, ops: Sequence[IPVSOp], progress: Progress | None) -> None:
    if progress is None:
        run.ipvs(ops)
        return
    for start in range(0, len(ops), PROGRESS_STEP):
        run.ipvs(ops[start : start + PROGRESS_STEP])
        progress(min(start + PROGRESS_STEP, len(ops)), len(ops))


def _remove(run: _Applier, plan: SyncPlan) -> None:
    """Drains, deletions and stale virtual servers; none where this sync could not add."""
    troubled = run.failed_virtual_servers()
    removals = [op for op in plan.ipvs.removals if virtual_of(op) not in troubled]
    run.held_back.extend(op for op in plan.ipvs.removals if virtual_of(op) in troubled)
    run.ipvs([*removals, *plan.ipvs.stale])


def _flush_deleted(run: _Applier, plan: SyncPlan) -> None:
    """Forget flows only to real servers that are really gone; new flows could not reach them."""
    deleted = {op for op in run.applied if isinstance(op, DeleteRealServer | DeleteVirtualServer)}
    flushes: list[FlushConntrack] = []
    for flush in plan.ipvs.flushes:
        gone = DeleteRealServer(flush.virtual, flush.real) in deleted
        if gone or DeleteVirtualServer(flush.virtual) in deleted:
            flushes.append(flush)
        else:
            run.held_back.append(flush)
    if not flushes:
        return
    try:
        results = run.kernel.conntrack.delete_entries([(f.virtual, f.real) for f in flushes])
    except KERNEL_ERRORS as error:
        results = [refusal(error)] * len(flushes)
    run.batch(flushes, [result if isinstance(result, OpError) else None for result in results])


def _unbind(run: _Applier, plan: SyncPlan) -> None:
    kept = {virtual_of(f.op).address for f in run.failures if isinstance(f.op, DeleteVirtualServer)}
    run.held_back.extend(op for op in plan.unbind if op.address in kept)
    unbind = [op for op in plan.unbind if op.address not in kept]
    if unbind:
        run.batch(unbind, run.kernel.addresses.apply(plan.interface, unbind))
