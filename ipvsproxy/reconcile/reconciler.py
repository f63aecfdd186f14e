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
    DeleteVirtualServer,
    DesiredChange,
    DesiredState,
    IPAddress,
    IPVSTable,
    IPVSTimeouts,
    PlanOp,
    RealServerRef,
    RestoreIptables,
    VirtualServerKey,
    VirtualServerState,
)
from ipvsproxy.reconcile.apply import ApplyOutcome, Failure, apply_plan
from ipvsproxy.reconcile.drift import AppliedRecord, count_drift, record_applied
from ipvsproxy.reconcile.graceful import DEFAULT_GRACE_PERIOD, Drain
from ipvsproxy.reconcile.parameters import LEAVE_CONNTRACK, ConntrackSettings
from ipvsproxy.reconcile.scoped import plan_change, to_read
from ipvsproxy.reconcile.state import KernelState, observe
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

    @property
    def ok(self) -> bool:
        return not self.failures


class Reconciler:
    def __init__(
        self,
        kernel: Kernel,
        settings: ReconcilerSettings = ReconcilerSettings(),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kernel = kernel
        self._settings = settings
        self._clock = clock
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

    def observe(self) -> KernelState:
        return observe(self._kernel, self._settings.interface)

    def plan(self, desired: DesiredState, actual: KernelState | None = None) -> SyncPlan:
        """What a sync would do now; nothing is written."""
        return plan_sync(
            desired,
            self.observe() if actual is None else actual,
            drains={ref: drain.started for ref, drain in self._drains.items()},
            now=self._clock(),
            grace_period=self._settings.grace_period,
            interface=self._settings.interface,
            strict_arp=self._settings.strict_arp,
            timeouts=self._settings.ipvs_timeouts,
            conntrack=self._settings.conntrack,
            node_addresses_before=self._node_addresses_before,
        )

    def sync(self, desired: DesiredState, actual: KernelState | None = None) -> SyncResult:
        """Make the kernel match ``desired``; ``actual`` replaces reading the kernel."""
        plan = self.plan(desired, actual)
        outcome = apply_plan(self._kernel, plan)
        attempted = [
            *plan.changes(),
            *(op for op in outcome.applied if isinstance(op, RestoreIptables)),
        ]
        drift = count_drift(attempted, self._record)
        return self._applied(desired, plan, outcome, {}, drift)

    def sync_change(
        self, desired: DesiredState, change: DesiredChange, drain_check: bool = False
    ) -> SyncResult:
        """Write only ``change``, trusting that the kernel holds what the last sync applied
        (see ``scoped``), after reading the few virtual servers ``to_read`` names; with a
        ``drain_check``, also the draining ones. Drains of other virtual servers are kept."""
        read = self._read(to_read(desired, change, self._drains, drain_check))
        plan = plan_change(
            desired,
            change,
            read=read,
            drains=self._drains,
            now=self._clock(),
            grace_period=self._settings.grace_period,
            interface=self._settings.interface,
        )
        outcome = apply_plan(self._kernel, plan)
        scope = change.virtual_servers.keys() | read.keys()
        kept = {ref: drain for ref, drain in self._drains.items() if ref.virtual not in scope}
        # No drift: the plan holds what the cluster changed, not what a read of the kernel found.
        return self._applied(desired, plan, outcome, kept, Counter())

    def _read(self, keys: Iterable[VirtualServerKey]) -> IPVSTable:
        """These virtual servers as the kernel has them (one it lacks is left out)."""
        table: dict[VirtualServerKey, VirtualServerState] = {}
        for key in sorted(keys, key=VirtualServerKey.sort_key):
            state = self._kernel.ipvs.virtual_server(key)
            if state is not None:
                table[key] = state
        return MappingProxyType(table)

    def _applied(
        self,
        desired: DesiredState,
        plan: SyncPlan,
        outcome: ApplyOutcome,
        kept: dict[RealServerRef, Drain],
        drift: Counter[str],
    ) -> SyncResult:
        not_applied = _not_applied(outcome)
        self._record = record_applied(desired, not_applied)
        self._node_addresses_before = desired.node_addresses | {
            op.key.address for op in not_applied if isinstance(op, DeleteVirtualServer)
        }
        self._drains = kept | {drain.ref: drain for drain in plan.ipvs.draining}
        return SyncResult(
            plan=plan,
            applied=outcome.applied,
            failures=outcome.failures,
            held_back=outcome.held_back,
            draining=plan.ipvs.draining,
            writes=outcome.writes,
            drift=MappingProxyType(dict(drift)),
        )


def _not_applied(outcome: ApplyOutcome) -> list[PlanOp]:
    return [*(failure.op for failure in outcome.failures), *outcome.held_back]
