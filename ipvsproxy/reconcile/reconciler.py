"""The reconciler: observe the kernel, plan against desired state, apply, remember drains.

It keeps only two things between syncs: when each drain began (to bound it) and what the last
sync applied (to tell drift from change). Everything else comes from the kernel each time, so
a failed op is simply planned again, and a new instance adopts whatever a previous one left.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ipvsproxy.kernel.protocols import Kernel
from ipvsproxy.model import (
    DUMMY_INTERFACE,
    IPVS_OPS,
    DeleteVirtualServer,
    DesiredChange,
    DesiredState,
    FlushConntrack,
    IPAddress,
    IPFamily,
    IPVSTable,
    IPVSTimeouts,
    PlanOp,
    RealServerRef,
    RestoreIptables,
    VirtualServerKey,
    VirtualServerState,
    virtual_of,
)
from ipvsproxy.reconcile.apply import ApplyOutcome, Failure, Progress, apply_plan
from ipvsproxy.reconcile.drift import AppliedRecord, count_drift, record_applied
from ipvsproxy.reconcile.graceful import DEFAULT_GRACE_PERIOD, Drain
from ipvsproxy.reconcile.held import quarantinable
from ipvsproxy.reconcile.parameters import LEAVE_CONNTRACK, ConntrackSettings
from ipvsproxy.reconcile.quarantine import Quarantine, Transition
from ipvsproxy.reconcile.scoped import plan_change, to_read
from ipvsproxy.reconcile.state import Between, DesiredNow, KernelState, observe
from ipvsproxy.reconcile.syncplan import UNSET_TIMEOUTS, SyncPlan, plan_sync


@dataclass(frozen=True, slots=True)
class ReconcilerSettings:
    # Longest a removed TCP real server keeps weight 0 waiting for its connections, seconds.
    grace_period: float = DEFAULT_GRACE_PERIOD
    interface: str = DUMMY_INTERFACE
    # --ipvs-strict-arp: arp_ignore=1, arp_announce=2.
    strict_arp: bool = False
    # --ipvs-tcp-timeout and friends; 0 leaves the kernel's.
    ipvs_timeouts: IPVSTimeouts = UNSET_TIMEOUTS
    # --conntrack-max-per-core and friends (kube-proxy's conntrack.*); the default leaves all.
    conntrack: ConntrackSettings = LEAVE_CONNTRACK


@dataclass(frozen=True, slots=True)
class SyncResult:
    plan: SyncPlan
    # Ops that changed the kernel.
    applied: tuple[PlanOp, ...]
    failures: tuple[Failure, ...]
    # Ops not tried because one they depend on failed; planned again next sync.
    held_back: tuple[PlanOp, ...]
    draining: tuple[Drain, ...]
    writes: int
    # Repairs of objects changed behind our back, by kind ("virtual_server", "real_server", ...).
    drift: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    # Ops not tried because what they write is in quarantine (see ``quarantine``).
    quarantined: tuple[PlanOp, ...] = ()
    # The failures that put (or kept) what they write in quarantine: refusals of one object.
    refused: tuple[Failure, ...] = ()
    # Objects that entered or left quarantine in this sync.
    transitions: tuple[Transition, ...] = ()
    # Something failed that is no refusal of one object (a transient error, or the kernel
    # not holding what was believed), or was held back for it: only a full sync can tell
    # what the kernel holds now.
    needs_full: bool = False

    @property
    def ok(self) -> bool:
        return not self.failures


@dataclass(frozen=True, slots=True)
class _Attempt:
    # The plan as applied: without what waits in quarantine.
    plan: SyncPlan
    outcome: ApplyOutcome
    # Ops not tried: what they write waits in quarantine.
    held: tuple[PlanOp, ...]


class Reconciler:
    def __init__(
        self,
        kernel: Kernel,
        settings: ReconcilerSettings = ReconcilerSettings(),
        clock: Callable[[], float] = time.monotonic,
        quarantine: Quarantine | None = None,
    ) -> None:
        self._kernel = kernel
        self._settings = settings
        self._clock = clock
        self._quarantine = quarantine if quarantine is not None else Quarantine()
        # Read by other threads (the daemon's timer), so kept apart from the quarantine.
        self._next_retry: float | None = None
        self._drains: dict[RealServerRef, Drain] = {}
        self._record = AppliedRecord()
        # The node's addresses our virtual servers were on, and those of stale ones not yet
        # deleted: still ours to clean up when the cluster no longer names them.
        self._node_addresses_before: frozenset[IPAddress] = frozenset()

    @property
    def drains(self) -> Mapping[RealServerRef, Drain]:
        """Every real server waiting at weight 0, as the last sync that looked at it saw it."""
        return MappingProxyType(self._drains)

    @property
    def last_desired(self) -> DesiredState | None:
        return self._record.desired

    @property
    def quarantine(self) -> Quarantine:
        """For the syncing thread only."""
        return self._quarantine

    @property
    def next_retry(self) -> float | None:
        """When an incremental sync would first retry a quarantined object (None: nothing
        to retry); safe to read from any thread."""
        return self._next_retry

    def observe(
        self,
        between: Between | None = None,
        desired: DesiredNow | None = None,
        iptables: Iterable[IPFamily] = (),
    ) -> KernelState:
        """The kernel's state (see ``state.observe``)."""
        return observe(self._kernel, self._settings.interface, between, desired, iptables)

    def plan(self, desired: DesiredState, actual: KernelState | None = None) -> SyncPlan:
        """What a sync would do now; nothing is written."""
        if actual is None:
            actual = self.observe(iptables=iptables_families(desired))
        return plan_sync(
            desired,
            actual,
            drains={ref: drain.started for ref, drain in self._drains.items()},
            now=self._clock(),
            grace_period=self._settings.grace_period,
            interface=self._settings.interface,
            strict_arp=self._settings.strict_arp,
            timeouts=self._settings.ipvs_timeouts,
            conntrack=self._settings.conntrack,
            node_addresses_before=self._node_addresses_before,
        )

    def sync(
        self,
        desired: DesiredState,
        actual: KernelState | None = None,
        progress: Progress | None = None,
    ) -> SyncResult:
        """Make the kernel match ``desired``; ``actual`` replaces reading the kernel;
        ``progress`` hears of the IPVS writes as they go (see ``apply_plan``)."""
        self._quarantine.sweep(desired)
        held_before = frozenset(self._quarantine.entries())
        attempt = self._apply(self.plan(desired, actual), None, progress)
        attempted = [
            *attempt.plan.changes(),
            *(op for op in attempt.outcome.applied if isinstance(op, RestoreIptables)),
        ]
        # A retry of a quarantined object repairs no drift: the kernel never had it.
        if held_before:
            attempted = [
                op
                for op in attempted
                if not any(obj in held_before for obj, _ in quarantinable(op))
            ]
        drift = count_drift(attempted, self._record)
        return self._applied(desired, attempt, {}, drift)

    def sync_change(
        self, desired: DesiredState, change: DesiredChange, drain_check: bool = False
    ) -> SyncResult:
        """Write only ``change``, trusting that the kernel holds what the last sync applied
        (see ``scoped``), after reading the few virtual servers ``to_read`` names; with a
        ``drain_check``, also the draining ones. Drains of other virtual servers are kept.
        Quarantined virtual servers the change touches or whose retry is due are read too."""
        now = self._clock()
        keys = to_read(desired, change, self._drains, drain_check)
        keys |= self._quarantine.to_read(change, now)
        change = self._quarantine.with_entries(change, now)
        self._quarantine.sweep(desired)
        read, missing = self._read(keys)
        planned = plan_change(
            desired,
            change,
            read=read,
            missing=missing,
            drains=self._drains,
            now=now,
            grace_period=self._settings.grace_period,
            interface=self._settings.interface,
        )
        attempt = self._apply(planned, keys)
        scope = change.virtual_servers.keys() | keys
        kept = {ref: drain for ref, drain in self._drains.items() if ref.virtual not in scope}
        # No drift: the plan holds what the cluster changed, not what a read of the kernel found.
        return self._applied(desired, attempt, kept, Counter())

    def _apply(
        self,
        plan: SyncPlan,
        planned: frozenset[VirtualServerKey] | None,
        progress: Progress | None = None,
    ) -> _Attempt:
        """Apply ``plan`` but for what is held in quarantine."""
        held = self._quarantine.hold_back(plan, self._clock(), planned)
        outcome = apply_plan(self._kernel, held.plan, progress)
        return _Attempt(held.plan, outcome, held.ops)

    def _read(
        self, keys: Iterable[VirtualServerKey]
    ) -> tuple[IPVSTable, frozenset[VirtualServerKey]]:
        """These virtual servers as the kernel has them, and those it does not have."""
        table: dict[VirtualServerKey, VirtualServerState] = {}
        missing: set[VirtualServerKey] = set()
        for key in sorted(keys, key=VirtualServerKey.sort_key):
            state = self._kernel.ipvs.virtual_server(key)
            if state is None:
                missing.add(key)
            else:
                table[key] = state
        return MappingProxyType(table), frozenset(missing)

    def _applied(
        self,
        desired: DesiredState,
        attempt: _Attempt,
        kept: dict[RealServerRef, Drain],
        drift: Counter[str],
    ) -> SyncResult:
        plan, outcome, held = attempt.plan, attempt.outcome, attempt.held
        others = self._quarantine.take_outcome(outcome, self._clock())
        held_for = self._quarantine.virtual_servers()
        refused = tuple(failure for failure in outcome.failures if failure not in others)
        needs_full = bool(others) or any(not _waits_for(op, held_for) for op in outcome.held_back)
        self._next_retry = self._quarantine.next_retry()
        not_applied = [*_not_applied(outcome), *held]
        self._record = record_applied(desired, not_applied)
        self._node_addresses_before = frozenset(desired.node_addresses).union(
            op.key.address for op in not_applied if isinstance(op, DeleteVirtualServer)
        )
        self._drains = kept | {drain.ref: drain for drain in plan.ipvs.draining}
        return SyncResult(
            plan=plan,
            applied=outcome.applied,
            failures=outcome.failures,
            held_back=outcome.held_back,
            draining=plan.ipvs.draining,
            writes=outcome.writes,
            drift=MappingProxyType(dict(drift)),
            quarantined=held,
            refused=refused,
            transitions=self._quarantine.take_transitions(),
            needs_full=needs_full,
        )


def iptables_families(desired: DesiredState) -> tuple[IPFamily, ...]:
    """The families whose rules a sync of ``desired`` restores."""
    return tuple(ruleset.family for ruleset in desired.iptables)


def _waits_for(op: PlanOp, virtual_servers: frozenset[VirtualServerKey]) -> bool:
    """Whether ``op``, held back, is on a virtual server that waits in quarantine (and is
    planned again when it is retried)."""
    if isinstance(op, FlushConntrack):
        return op.virtual in virtual_servers
    return isinstance(op, IPVS_OPS) and virtual_of(op) in virtual_servers


def _not_applied(outcome: ApplyOutcome) -> list[PlanOp]:
    return [*(failure.op for failure in outcome.failures), *outcome.held_back]
