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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

from ipvsproxy.daemon.changes import EMPTY_SNAPSHOT, NO_CHANGES, Changes, combined, diff
from ipvsproxy.daemon.progress import ProgressLog
from ipvsproxy.daemon.sources import Reading
from ipvsproxy.kernel.protocols import Kernel
from ipvsproxy.model import (
    DUMMY_INTERFACE,
    ChangedKeys,
    ClusterSnapshot,
    DesiredState,
    DesiredVirtualServer,
    EndpointSlice,
    ObjectKey,
    PlanOp,
    Rejection,
    VirtualServerKey,
)
from ipvsproxy.reconcile.reconciler import Reconciler, SyncResult, iptables_families
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
    snapshot: ClusterSnapshot
    changes: Changes
    # Rejections not in the previous sync's desired state.
    new_rejections: tuple[Rejection, ...]
    seconds: float


@dataclass(frozen=True, slots=True)
class Interleave:
    """How a periodic full sync lets changes through while it reads the kernel: ``due`` gives
    the reading of a sync that is due now (None: none is), and ``done`` hears of the
    incremental sync made of it, as of any other."""

    due: Callable[[], Reading | None]
    done: Callable[[SyncReport], None]


NO_VIRTUAL_SERVERS: Mapping[VirtualServerKey, DesiredVirtualServer] = MappingProxyType({})


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
        interleave: Interleave | None = None,
    ) -> SyncReport:
        """``changed``: the objects that may differ from the last snapshot given, if known.
        ``interleave``: a periodic full sync makes the syncs due while it reads the kernel
        (see ``_full``); others, and every sync without it, make them wait."""
        started = time.perf_counter()
        snapshot = self._with_local_addresses(snapshot)
        # Until this sync has finished, a failure in it leaves the kernel and the kept
        # translation in doubt (and ``changed`` lost): the next sync is then a full one.
        in_doubt, self._full_needed = self._full_needed, True
        changes = diff(self._snapshot, snapshot, None if in_doubt else changed)
        previous = self._reconciler.last_desired
        if in_doubt or changes.node or previous is None or self.full_sync_due():
            trusted = not in_doubt and not changes.node and previous is not None
            report = self._full(
                snapshot,
                rejections,
                changes,
                trusted=trusted,
                interleave=interleave if trusted else None,
                started=started,
            )
        else:
            report = self._incremental_sync(snapshot, rejections, changes, started)
        # A belief the kernel did not confirm is not a belief to plan against; an object it
        # refused waits in quarantine, and says nothing about the rest.
        self._full_needed = report.result.needs_full
        return report

    def _with_local_addresses(self, snapshot: ClusterSnapshot) -> ClusterSnapshot:
        """The node's own addresses, as kube-proxy reads them at every sync: a change counts
        as a change of the Node (cheap to read while nothing changed: see local_addresses)."""
        addresses = self._kernel.addresses.local_addresses(DUMMY_INTERFACE)
        return replace(snapshot, local_addresses=addresses)

    def _full(
        self,
        snapshot: ClusterSnapshot,
        rejections: list[Rejection],
        changes: Changes,
        *,
        trusted: bool,
        interleave: Interleave | None,
        started: float,
    ) -> SyncReport:
        """The kernel read whole and every difference repaired. With ``interleave`` (a
        periodic full sync of a kernel believed to hold the last sync's state), the changes
        it was given are written first, as an incremental sync; then the syncs due meanwhile
        are made between the reads of two virtual servers, and the plan is of the newest
        translation against the kernel as they left it: a change does not wait for the
        whole table to be read."""
        self._last_full = self._clock()
        if interleave is not None and changes.services:
            # Written first, as any change: a sync made inside builds on what the kernel
            # holds, and the translation must not be ahead of it.
            made = self._incremental_sync(snapshot, rejections, changes, started)
            interleave.done(made)
            started, changes = time.perf_counter(), NO_CHANGES
            if made.result.needs_full:
                interleave = None
        translated = self._full_translation(snapshot, changes, trusted=trusted)
        self._snapshot = snapshot
        between = _Between(self, interleave, rejections, changes) if interleave else None
        actual = self._reconciler.observe(
            between, self._translated if between else None, iptables_families(translated)
        )
        if between is not None:
            snapshot, rejections, changes = self._snapshot, between.rejections, between.changes
            translated = self._incremental.desired or translated
        desired = _with(rejections, translated)
        before = self._reconciler.last_desired
        result = self._reconciler.sync(desired, actual, progress=ProgressLog(self._clock))
        return _report(
            SyncMode.FULL,
            result,
            desired,
            snapshot=snapshot,
            changes=changes,
            before=before,
            started=started,
            nested=between.seconds if between is not None else 0.0,
        )

    def _incremental_sync(
        self,
        snapshot: ClusterSnapshot,
        rejections: list[Rejection],
        changes: Changes,
        started: float,
    ) -> SyncReport:
        """Only what changed, against the state the last sync left."""
        translated = self._incremental.update(snapshot, changes.services, changes.endpoint_slices)
        desired = _with(rejections, translated.desired)
        before = self._reconciler.last_desired
        result = self._reconciler.sync_change(
            desired, translated.change, drain_check=self.drain_check_wanted
        )
        self.drain_check_wanted = False
        self._snapshot = snapshot
        return _report(
            SyncMode.INCREMENTAL,
            result,
            desired,
            snapshot=snapshot,
            changes=changes,
            before=before,
            started=started,
        )

    def _translated(self) -> Mapping[VirtualServerKey, DesiredVirtualServer]:
        """The kept translation's virtual servers, as the last sync left them."""
        desired = self._incremental.desired
        return desired.virtual_servers if desired is not None else NO_VIRTUAL_SERVERS

    def _between(self, reading: Reading) -> SyncReport | Changes:
        """A sync due while a full one reads the kernel: incremental, or only its changes
        when the full sync alone can make it (the Node changed): then the translation is
        brought up to date for the full sync to apply."""
        started = time.perf_counter()
        snapshot = self._with_local_addresses(reading.snapshot)
        changes = diff(self._snapshot, snapshot, reading.changed)
        if changes.node:
            self._incremental.rebuild(snapshot)
            self._snapshot = snapshot
            return changes
        return self._incremental_sync(snapshot, reading.rejections, changes, started)

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


class _Between:
    """What a full sync runs between its reads of two virtual servers: the syncs due, until
    one fails or needs a full sync (later ones wait for this one to end, which repairs all)."""

    def __init__(
        self,
        syncer: Syncer,
        interleave: Interleave,
        rejections: list[Rejection],
        changes: Changes,
    ) -> None:
        self._syncer = syncer
        self._interleave = interleave
        self._open = True
        # What the full sync reports: the newest rejections, and the changes folded into it.
        self.rejections = rejections
        self.changes = changes
        # Spent in the incremental syncs made, not in the full one.
        self.seconds = 0.0

    def __call__(self) -> Sequence[PlanOp]:
        if not self._open or (reading := self._interleave.due()) is None:
            return ()
        started = time.perf_counter()
        self.rejections = reading.rejections
        made = self._syncer._between(reading)
        if isinstance(made, Changes):
            self._open = False
            self.changes = combined(self.changes, made)
            applied: Sequence[PlanOp] = ()
        else:
            self._open = not made.result.needs_full
            self._interleave.done(made)
            applied = made.result.applied
        self.seconds += time.perf_counter() - started
        return applied


def _report(
    mode: SyncMode,
    result: SyncResult,
    desired: DesiredState,
    *,
    snapshot: ClusterSnapshot,
    changes: Changes,
    before: DesiredState | None,
    started: float,
    nested: float = 0.0,
) -> SyncReport:
    """``before``: the desired state of the sync before; ``nested``: seconds spent in syncs
    made inside this one."""
    seen = set(before.rejections) if before is not None else set()
    return SyncReport(
        mode=mode,
        result=result,
        desired=desired,
        snapshot=snapshot,
        changes=changes,
        new_rejections=tuple(r for r in desired.rejections if r not in seen),
        seconds=time.perf_counter() - started - nested,
    )


def _with(rejections: list[Rejection], desired: DesiredState) -> DesiredState:
    """The desired state with the source's rejections (objects that did not parse) first."""
    if not rejections:
        return desired
    return replace(desired, rejections=(*rejections, *desired.rejections))
