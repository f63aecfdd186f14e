"""The daemon: the cluster source, the bounded-frequency sync loop, health, metrics, timers.

Order of a run: serve /healthz and /metrics; start watching; wait until every initial list
has arrived (nothing is written before: a half-listed cluster must never delete anything);
then sync fully once, and from there on as the runner allows. ``stop`` ends it all and leaves
the kernel as it is, so traffic keeps flowing while the proxy is replaced.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial

from ipvsproxy import defaults
from ipvsproxy.cluster import api
from ipvsproxy.cluster.events import EventSink, EventSource
from ipvsproxy.cluster.informer import InformerHooks
from ipvsproxy.daemon.events import EventRecorder
from ipvsproxy.daemon.health import ProxierHealth
from ipvsproxy.daemon.heap import release_free_memory
from ipvsproxy.daemon.http import (
    TEXT,
    Handler,
    HttpHub,
    HttpLimits,
    HttpListener,
    PathHandler,
    Response,
)
from ipvsproxy.daemon.metrics import Metrics
from ipvsproxy.daemon.nodeports import (
    HealthCheckNodePorts,
    health_check_hosts,
    local_endpoint_counts,
)
from ipvsproxy.daemon.port_holder import cannot_listen
from ipvsproxy.daemon.quarantine_report import QuarantineReport
from ipvsproxy.daemon.runner import BoundedFrequencyRunner
from ipvsproxy.daemon.sources import ClusterSource, Reading
from ipvsproxy.daemon.syncer import Interleave, Syncer, SyncMode, SyncReport
from ipvsproxy.gcpause import cyclic_gc_paused, freeze_survivors
from ipvsproxy.kernel.preconditions import try_scheduler
from ipvsproxy.kernel.protocols import Kernel
from ipvsproxy.model import DesiredState, RestoreIptables, VirtualServerState
from ipvsproxy.owners import PATH as OWNERS
from ipvsproxy.owners import owners_json, service_of
from ipvsproxy.reconcile.describe import describe
from ipvsproxy.reconcile.quarantine import Quarantine
from ipvsproxy.reconcile.reconciler import Reconciler, ReconcilerSettings, SyncResult
from ipvsproxy.supervise import RestartPolicy, Supervisor, Worker, stop_all
from ipvsproxy.translate import Settings

log = logging.getLogger(__name__)

SERVICES = api.SERVICES.plural.lower()
ENDPOINT_SLICES = api.ENDPOINT_SLICES.plural.lower()


@dataclass(frozen=True, slots=True)
class DaemonOptions:
    sync_period: float = defaults.SYNC_PERIOD_SECONDS
    min_sync_period: float = defaults.MIN_SYNC_PERIOD_SECONDS
    # (host, port) to serve on, or None for off.
    healthz: tuple[str, int] | None = defaults.HEALTHZ_BIND
    metrics: tuple[str, int] | None = defaults.METRICS_BIND
    # Reads the IPVS counters for the per-service traffic metrics; None turns them off.
    traffic: Callable[[], Iterable[VirtualServerState]] | None = None
    # How often the loop checks whether a full sync is due.
    tick: float = 1.0
    # How often, while real servers drain, the kernel is read to delete the idle ones.
    drain_check_period: float = 5.0
    health_check_host: str = ""
    # Kernel parameters (--ipvs-strict-arp, --ipvs-*-timeout) and the like, for every sync.
    reconciler: ReconcilerSettings = field(default_factory=ReconcilerSettings)
    # What every HTTP server together may hold (connections, time, memory).
    http: HttpLimits = field(default_factory=HttpLimits)
    # How the daemon's threads are restarted when they fail, and when /livez gives up on one.
    restarts: RestartPolicy = field(default_factory=RestartPolicy)
    # The node, as the source of the Events the daemon writes.
    node_name: str = ""


class ServeError(Exception):
    """A server cannot listen; the message names the address, why, and what holds it."""


class Daemon:
    def __init__(
        self,
        kernel: Kernel,
        settings: Settings,
        options: DaemonOptions,
        events: EventSink | None = None,
    ) -> None:
        """``events``: where Events about Services go (None: nowhere, as with --source)."""
        self._options = options
        self._settings = settings
        # --ipvs-scheduler was tried at start; a scheduler an annotation names is tried once.
        quarantine = Quarantine(
            try_scheduler=partial(try_scheduler, kernel.ipvs),
            accepted_schedulers={settings.scheduler},
        )
        self.syncer = Syncer(
            kernel,
            settings,
            options.sync_period,
            Reconciler(kernel, options.reconciler, quarantine=quarantine),
        )
        self.metrics = Metrics(self._traffic if options.traffic is not None else None)
        # Every thread of the daemon, the source's included, is a worker of this one.
        self.workers = Supervisor(options.restarts, on_failure=self.metrics.worker_failed)
        self.metrics.watch_workers(self.workers)
        self.health = ProxierHealth(timeout=2 * options.sync_period, failing=self.workers.failing)
        self.http = HttpHub(self.workers, options.http)
        self.metrics.watch_http(self.http)
        self.metrics.watch_programmed(lambda: self.syncer.last_desired)
        self.health_check_ports = HealthCheckNodePorts(self.http, options.health_check_host)
        self.events = (
            EventRecorder(
                events,
                EventSource("ipvsproxy", options.node_name),
                counted=lambda result: self.metrics.events.labels(result=result).inc(),
            )
            if events is not None
            else None
        )
        self._quarantine_report = QuarantineReport(self.metrics, self.events)
        self.runner = BoundedFrequencyRunner(
            self._sync, options.min_sync_period, options.sync_period
        )
        self._source: ClusterSource | None = None
        self._pending: Counter[str] = Counter()
        self._pending_lock = threading.Lock()
        self._listeners: list[HttpListener] = []
        self.synced = threading.Event()

    # -- what sources call, from their threads ------------------------------------------------

    def changed(self, resource: str = "") -> None:
        """The cluster changed: queue a sync (kube-proxy's OnServiceUpdate and friends)."""
        with self._pending_lock:
            self._pending[resource] += 1
            self.metrics.service_changes_pending.set(self._pending[SERVICES])
            self.metrics.endpoint_changes_pending.set(self._pending[ENDPOINT_SLICES])
        self.health.queued_update()
        self.metrics.last_queued.set_to_current_time()
        self.runner.request()

    def informer_hooks(self) -> InformerHooks:
        return InformerHooks(
            changed=self.changed,
            relisted=lambda resource: self.metrics.relists.labels(resource=resource).inc(),
            watch_restarted=lambda resource: self.metrics.watch_restarts.labels(
                resource=resource
            ).inc(),
            malformed_event=lambda resource: self.metrics.watch_malformed_events.labels(
                resource=resource
            ).inc(),
        )

    # -- running --------------------------------------------------------------------------------

    def serve(self) -> None:
        """Serve /healthz, /livez and /metrics (each only if given an address); ServeError
        if one cannot listen."""
        options, metrics = self._options, self.metrics
        if options.healthz is not None:
            routes = {
                "/healthz": metrics.counted(metrics.healthz, self.health.healthz),
                "/livez": metrics.counted(metrics.livez, self.health.livez),
            }
            self._listen("/healthz and /livez (--healthz-bind-address)", options.healthz, routes)
        if options.metrics is not None:
            # The translation's owners for `ipvsproxy show` beside /metrics, as kube-proxy
            # serves /configz there: on loopback unless the metrics are exposed.
            routes = {"/metrics": metrics.response, OWNERS: self._owners}
            prefixes = {f"{OWNERS}/": self._owners}
            what = "/metrics (--metrics-bind-address)"
            self._listen(what, options.metrics, routes, prefixes)
        self.http.start()

    def _listen(
        self,
        what: str,
        address: tuple[str, int],
        routes: Mapping[str, Handler],
        prefixes: Mapping[str, PathHandler] | None = None,
    ) -> None:
        try:
            self._listeners.append(self.http.serve(*address, routes, prefixes))
        except OSError as error:
            for listener in self._listeners:
                listener.close()
            self._listeners.clear()
            raise ServeError(cannot_listen(what, *address, error)) from None

    @property
    def ports(self) -> list[int]:
        """The ports served, in the order healthz, metrics (those that are on)."""
        return [listener.port for listener in self._listeners]

    def run(self, source: ClusterSource, stop: threading.Event) -> None:
        """Serve, watch and sync until ``stop`` is set; the kernel is left as it is."""
        self._source = source
        if not self._listeners:
            self.serve()
        # Not yet listed is an update queued: unhealthy if the lists never arrive.
        self.health.queued_update()
        # Events are written by a worker of their own, so that no sync waits for the API.
        recording = (
            [self.workers.spawn("events", self.events.run, stop=self.events.stop)]
            if self.events is not None
            else []
        )
        source.start()
        loops: list[Worker] = []
        try:
            log.info("waiting for the initial lists")
            while not source.wait_for_sync(0.2):
                if stop.is_set():
                    return
            log.info("initial lists complete; first sync")
            self.runner.request()
            # The timer has a stop of its own: ``stop`` is set by signals, before the timer's
            # worker is asked, and a worker's return before it is asked is a failure.
            tick_stop = threading.Event()
            loops = [
                self.workers.spawn("sync", self.runner.loop, stop=self.runner.stop),
                self.workers.spawn("tick", partial(self._tick, tick_stop), stop=tick_stop.set),
            ]
            while not stop.wait(0.5):
                pass
        finally:
            log.info("stopping; the kernel state stays in place")
            stop.set()
            stop_all(loops)
            source.stop()
            stop_all(recording)
            self.health_check_ports.stop()
            self.http.stop()
            self._listeners.clear()
            self.workers.stop()

    def _tick(self, stop: threading.Event) -> None:
        """The graceful-termination timer, the periodic full sync on time, and the retries of
        quarantined objects."""
        last_drain_check = time.monotonic()
        while not stop.wait(self._options.tick):
            now = time.monotonic()
            drain_check_due = now - last_drain_check >= self._options.drain_check_period
            if drain_check_due and self.syncer.reconciler.drains:
                last_drain_check = now
                self.syncer.drain_check_wanted = True
                self.runner.request()
            elif self.syncer.full_sync_due() or self.syncer.retry_due():
                self.runner.request()

    def _sync(self) -> None:
        # One pause across the sync and the freeze: what a full sync builds is walked once,
        # by the freeze's collection, not also at the end of each of its stages.
        with cyclic_gc_paused():
            if self._sync_once() is not SyncMode.FULL:
                return
            # What a full sync keeps is long-lived: no later collection need walk it.
            freeze_survivors()
        # The kernel's dump and the plan (the whole cluster on the first) are freed by now:
        # give their pages back rather than hold them until the next.
        release_free_memory()

    def _sync_once(self) -> SyncMode | None:
        """Sync, record and report; the sync's mode, None when it failed."""
        # A periodic full sync makes the syncs that come due while it reads the kernel.
        interleave = Interleave(due=self._due_reading, done=self._synced)
        reading = self._reading()
        try:
            report = self.syncer.sync(*reading, interleave=interleave)
        except Exception:
            # The next sync is a full one; meanwhile /healthz turns 503 if this persists.
            log.exception("sync failed")
            self.metrics.syncs.labels(mode="unknown", result="error").inc()
            return None
        self._synced(report)
        return report.mode

    def _reading(self) -> Reading:
        """The cluster as the source has it now, taken for a sync that begins."""
        assert self._source is not None
        log.debug("syncing")
        self.health.sync_began()
        with self._pending_lock:
            self._pending.clear()
        self.metrics.service_changes_pending.set(0)
        self.metrics.endpoint_changes_pending.set(0)
        reading = self._source.snapshot()
        self.health.set_node(reading.snapshot.node)
        return reading

    def _due_reading(self) -> Reading | None:
        """A reading for the sync the runner has due now, if it has one."""
        if not self.runner.take_due():
            return None
        try:
            return self._reading()
        except BaseException:
            # Not taken after all: the runner makes it once the sync that took it has ended.
            self.runner.request()
            raise

    def _synced(self, report: SyncReport) -> None:
        """Record and report a sync that ended."""
        self._record(report)
        desired, snapshot = report.desired, report.snapshot
        self._quarantine_report.report(
            report.result.transitions, self.syncer.reconciler.quarantine, desired, snapshot.services
        )
        self.health_check_ports.update(
            desired.health_check_node_ports,
            local_endpoint_counts(
                snapshot.node, desired.health_check_node_ports, self.syncer.slices_of
            ),
            health_check_hosts(self._settings, desired),
        )
        self.metrics.no_local_endpoints.counts = dict(desired.no_local_endpoints)
        if not any(isinstance(f.op, RestoreIptables) for f in report.result.failures):
            self.health.updated()
            self.metrics.last_sync.set_to_current_time()
            now = time.time()
            for trigger in report.changes.trigger_times:
                self.metrics.network_programming.observe(max(0.0, now - trigger))
        self.synced.set()

    def _record(self, report: SyncReport) -> None:
        result, metrics = report.result, self.metrics
        metrics.sync_duration.observe(report.seconds)
        if report.mode is SyncMode.FULL:
            metrics.full_sync_duration.observe(report.seconds)
            metrics.last_full_sync.set_to_current_time()
        else:
            metrics.partial_sync_duration.observe(report.seconds)
        metrics.syncs.labels(mode=report.mode.value, result=_result(result)).inc()
        metrics.service_changes.inc(report.changes.service_objects)
        metrics.endpoint_changes.inc(report.changes.endpoint_slice_objects)
        for op in result.applied:
            metrics.kernel_operations.labels(kind=type(op).__name__, result="ok").inc()
            log.debug("applied: %s", describe(op))
        refused = set(result.refused)
        for failure in result.failures:
            metrics.kernel_operations.labels(kind=type(failure.op).__name__, result="error").inc()
            if isinstance(failure.op, RestoreIptables):
                metrics.iptables_restore_failures.inc()
            # A refusal of one object is told once, as it enters quarantine.
            if failure in refused:
                log.debug("kernel refused, in quarantine: %s", failure)
            else:
                log.warning("kernel refused: %s", failure)
        for op in result.held_back:
            metrics.kernel_operations.labels(kind=type(op).__name__, result="held_back").inc()
            log.debug("held back: %s", describe(op))
        for kind, count in result.drift.items():
            if count:
                metrics.drift_repairs.labels(kind=kind).inc(count)
                log.warning("repaired %d %s changed behind our back", count, kind)
        for rejection in report.new_rejections:
            metrics.objects_skipped.labels(reason=rejection.category.value).inc()
            log.warning("skipped %s: %s", rejection.object, rejection.reason)
        metrics.real_servers_draining.set(len(self.syncer.reconciler.drains))
        log.info(
            "synced",
            extra={
                "mode": report.mode.value,
                "changed_services": len(report.changes.services),
                "writes": result.writes,
                "failures": len(result.failures),
                "draining": len(result.draining),
                "seconds": round(report.seconds, 4),
            },
        )

    def _owners(self, subpath: str = "") -> Response:
        """Every virtual server's owner, or one Service's (``/owners/NAMESPACE/NAME``)."""
        service = service_of(subpath) if subpath else None
        if subpath and service is None:
            return Response(404, TEXT, b"not /owners/NAMESPACE/NAME\n")
        body = owners_json(self.syncer.last_desired, service)
        return Response(200, "application/json", body)

    def _traffic(self) -> tuple[Iterable[VirtualServerState], DesiredState | None]:
        assert self._options.traffic is not None
        return self._options.traffic(), self.syncer.last_desired


def _result(result: SyncResult) -> str:
    """A sync's result label: ``refused`` when all that failed were objects the kernel will
    not take, each held in quarantine (its own metrics and alert tell of them), so that
    ``failed`` means something a retry may fix."""
    if result.ok:
        return "ok"
    return "refused" if len(result.refused) == len(result.failures) else "failed"
