"""One sync of the daemon: full (the kernel read and repaired) or incremental (changed services).

* full: on start, every sync period, after a sync in which something failed that is no
  refusal of one object (a transient error, or the kernel not holding what was believed),
  when the Node changed or a Node's addresses did, and never for less: the kernel is read
  whole and every difference repaired. An object the kernel refuses waits in quarantine
  instead (``reconcile.quarantine``), retried by incremental syncs, so one tenant's bad object
  never makes every sync a full one;
* incremental: update the kept translation with the Services and EndpointSlices that changed
  since the last sync (as the source names them), and write only what that changed, against
  the state the last sync left (nothing is read): its cost follows the change, not the cluster;
* drain check: an incremental sync that also reads the virtual servers with real servers
  draining, one by one (not the whole table), and deletes the drained ones.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from ipvsproxy.daemon.changes import EMPTY_SNAPSHOT, Changes, diff
from ipvsproxy.daemon.progress import ProgressLog
from ipvsproxy.kernel.protocols import Kernel
from ipvsproxy.model import (
    DUMMY_INTERFACE,
    ChangedKeys,
    ClusterSnapshot,
    DesiredState,
    EndpointSlice,
    ObjectKey,
    Rejection,
)
from ipvsproxy.reconcile.reconciler import Reconciler, SyncResult
from ipvsproxy.translate import Settings
from ipvsproxy.translate.incremental import IncrementalTranslation


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
        self._incremental = IncrementalTranslation(settings)
        self._last_full: float | None = None
        self._full_needed = True
        self.drain_check_wanted = False

    @property
    def reconciler(self) -> Reconciler:
        return self._reconciler

    @property
    def last_desired(self) -> DesiredState | None:
        return self._reconciler.last_desired

    def slices_of(self, service: ObjectKey) -> Iterable[EndpointSlice]:
        """The EndpointSlices of ``service`` handled by the last sync's translation."""
        return self._incremental.slices_of(service)

    def full_sync_due(self) -> bool:
        return self._last_full is None or self._clock() - self._last_full >= self._sync_period

    def retry_due(self) -> bool:
        """Whether a quarantined object is due to be tried again (safe from any thread)."""
        retry = self._reconciler.next_retry
        return retry is not None and self._clock() >= retry

    def sync(
        self,
        snapshot: ClusterSnapshot,
        rejections: list[Rejection],
        changed: ChangedKeys | None = None,
    ) -> SyncReport:
        """``changed``: the objects that may differ from the last snapshot given, if known."""
        started = time.perf_counter()
        # The node's own addresses, as kube-proxy reads them at every sync: a change counts as
        # a change of the Node (cheap to read while nothing changed: see local_addresses).
        snapshot = replace(
            snapshot, local_addresses=self._kernel.addresses.local_addresses(DUMMY_INTERFACE)
        )
        # Until this sync has finished, a failure in it leaves the kernel and the kept
        # translation in doubt (and ``changed`` lost): the next sync is then a full one.
        in_doubt, self._full_needed = self._full_needed, True
        changes = diff(self._snapshot, snapshot, None if in_doubt else changed)
        previous = self._reconciler.last_desired
        full = in_doubt or changes.node or previous is None or self.full_sync_due()
        if full:
            mode = SyncMode.FULL
            self._last_full = self._clock()
            desired = self._full_translation(
                snapshot, changes, trusted=not in_doubt and not changes.node
            )
            desired = _with(rejections, desired)
            result = self._reconciler.sync(desired, progress=ProgressLog(self._clock))
        else:
            mode = SyncMode.INCREMENTAL
            translated = self._incremental.update(
                snapshot, changes.services, changes.endpoint_slices
            )
            desired = _with(rejections, translated.desired)
            result = self._reconciler.sync_change(
                desired, translated.change, drain_check=self.drain_check_wanted
            )
        self.drain_check_wanted = False
        # A belief the kernel did not confirm is not a belief to plan against; an object it
        # refused waits in quarantine, and says nothing about the rest.
        self._full_needed = result.needs_full
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

    def _full_translation(
        self, snapshot: ClusterSnapshot, changes: Changes, *, trusted: bool
    ) -> DesiredState:
        """The kept translation, updated; built afresh when it is not ``trusted`` (a sync
        failed, or the Node changed). Property tests hold the two ways to the same result, so
        a periodic full sync repairs the kernel, not the translation."""
        if trusted and self._incremental.desired is not None:
            return self._incremental.update(
                snapshot, changes.services, changes.endpoint_slices
            ).desired
        return self._incremental.rebuild(snapshot)


def _with(rejections: list[Rejection], desired: DesiredState) -> DesiredState:
    """The desired state with the source's rejections (objects that did not parse) first."""
    if not rejections:
        return desired
    return replace(desired, rejections=(*rejections, *desired.rejections))
