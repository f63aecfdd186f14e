"""One sync of the daemon: full (the kernel read and repaired) or incremental (changed services).

* full: on start, every sync period, after a sync that left something unapplied, when the
  Node changed, and never for less: the kernel is read whole and every difference repaired;
* incremental: translate the snapshot, then plan only the virtual servers of the services
  that changed since the last sync, against the state the last sync left (nothing is read);
* drain check: the virtual servers with real servers draining are read from the kernel so
  their connection counts are current, and the drained ones deleted.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import MappingProxyType

from ipvsproxy.daemon.changes import EMPTY_SNAPSHOT, Changes, diff
from ipvsproxy.kernel.protocols import Kernel
from ipvsproxy.model import ClusterSnapshot, DesiredState, Rejection
from ipvsproxy.reconcile.reconciler import Reconciler, SyncResult
from ipvsproxy.reconcile.scoped import believed_state, services_virtual_servers
from ipvsproxy.translate import ServiceCache, Settings, translate

log = logging.getLogger(__name__)


class SyncMode(enum.StrEnum):
    FULL = "full"
    INCREMENTAL = "incremental"


@dataclass(frozen=True, slots=True)
class SyncReport:
    mode: SyncMode
    result: SyncResult
    desired: DesiredState
    changes: Changes
    # Rejections not in the previous sync's desired state.
    new_rejections: tuple[Rejection, ...]
    seconds: float


class Syncer:
    """Not thread-safe: the runner calls ``sync`` from one thread; others only set flags."""

    def __init__(
        self,
        kernel: Kernel,
        settings: Settings,
        sync_period: float,
        reconciler: Reconciler | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kernel = kernel
        self._settings = settings
        self._sync_period = sync_period
        self._reconciler = reconciler or Reconciler(kernel, clock=clock)
        self._clock = clock
        self._snapshot = EMPTY_SNAPSHOT
        self._translations = ServiceCache()
        self._last_full: float | None = None
        self._full_needed = True
        self.drain_check_wanted = False

    @property
    def reconciler(self) -> Reconciler:
        return self._reconciler

    @property
    def last_desired(self) -> DesiredState | None:
        return self._reconciler.last_desired

    def full_sync_due(self) -> bool:
        return self._last_full is None or self._clock() - self._last_full >= self._sync_period

    def sync(self, snapshot: ClusterSnapshot, rejections: list[Rejection]) -> SyncReport:
        started = time.perf_counter()
        changes = diff(self._snapshot, snapshot)
        previous = self._reconciler.last_desired
        full = self._full_needed or changes.node or previous is None or self.full_sync_due()
        if full or changes.any or previous is None:
            desired = translate(snapshot, self._settings, self._translations)
            desired = replace(desired, rejections=(*rejections, *desired.rejections))
        else:
            # Nothing changed (a drain check): the cluster translates as it did last time.
            desired = previous
        # Until this sync has finished, a crash in it means the kernel is not what we think.
        self._full_needed = True
        if full:
            mode = SyncMode.FULL
            self._last_full = self._clock()
            result = self._reconciler.sync(desired)
        else:
            assert previous is not None
            mode = SyncMode.INCREMENTAL
            result = self._incremental(desired, previous, changes)
        self.drain_check_wanted = False
        # A belief the kernel did not confirm is not a belief to plan against.
        self._full_needed = not result.ok or bool(result.held_back)
        self._snapshot = snapshot
        seen = set(previous.rejections) if previous is not None else set()
        return SyncReport(
            mode=mode,
            result=result,
            desired=desired,
            changes=changes,
            new_rejections=tuple(r for r in desired.rejections if r not in seen),
            seconds=time.perf_counter() - started,
        )

    def _incremental(
        self, desired: DesiredState, previous: DesiredState, changes: Changes
    ) -> SyncResult:
        drains = self._reconciler.drains
        scope = services_virtual_servers(changes.services, previous, desired)
        actual = believed_state(previous, drains, scope)
        if self.drain_check_wanted and drains:
            draining = frozenset(ref.virtual for ref in drains)
            table = self._kernel.ipvs.dump()
            read = {key: table[key] for key in draining if key in table}
            actual = believed_state(previous, drains, scope | draining)
            actual = replace(actual, ipvs=MappingProxyType({**actual.ipvs, **read}))
            scope = scope | draining
        return self._reconciler.sync(desired, actual, scope)
