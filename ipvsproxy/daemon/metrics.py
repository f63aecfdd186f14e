"""/metrics: kube-proxy's metric names and buckets, and ours under ``ipvsproxy_``."""

from __future__ import annotations

import io
import platform
from collections.abc import Callable, Iterable, Mapping

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    UnknownMetricFamily,
)
from prometheus_client.registry import Collector

from ipvsproxy import __version__
from ipvsproxy.daemon.http import DROP_REASONS, HttpHub, Response
from ipvsproxy.daemon.traffic_metrics import TrafficSource, totals, write_text
from ipvsproxy.model import DesiredState, SkipReason
from ipvsproxy.reconcile.drift import DRIFT_KINDS
from ipvsproxy.supervise import Supervisor

# ipvsproxy_syncs_total's results (daemon._result), "error" when the sync itself raised.
SYNC_RESULTS = ("ok", "refused", "failed", "error")


def _linear(start: float, width: float, count: int) -> list[float]:
    return [start + width * i for i in range(count)]


# kube-proxy's buckets (pkg/proxy/metrics): 1 ms doubling to ~16 s for a sync.
SYNC_BUCKETS = [0.001 * 2**i for i in range(15)]
NETWORK_PROGRAMMING_BUCKETS = [
    *_linear(0.25, 0.25, 2),
    *_linear(1, 1, 59),
    *_linear(60, 5, 12),
    *_linear(120, 30, 7),
]


class _NoLocalEndpoints(Collector):
    """kube-proxy exports this as a gauge named ``_total``, which promtool's lint refuses (a
    gauge's name never ends in _total); untyped carries the same samples under the same name,
    and a query or alert cannot tell the two apart."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {"internal": 0, "external": 0}

    def collect(self) -> Iterable[Metric]:
        family = UnknownMetricFamily(
            "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
            "Number of services with a Local traffic policy and no endpoints",
            labels=["traffic_policy"],
        )
        for policy, count in sorted(self.counts.items()):
            family.add_metric([policy], count)
        yield family


class _InQuarantine(Collector):
    """A gauge by kind and reason; a pair seen once stays, at 0 when none is left."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}

    def set(self, counts: Mapping[tuple[str, str], int]) -> None:
        self.counts = {**dict.fromkeys(self.counts, 0), **counts}

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(
            "ipvsproxy_objects_in_quarantine",
            "Objects the kernel refused that wait to be tried again, by kind and reason",
            labels=["kind", "reason"],
        )
        for (kind, reason), count in sorted(self.counts.items()):
            family.add_metric([kind, reason], count)
        yield family


class _Workers(Collector):
    """Whether each of the daemon's threads runs, read at scrape time."""

    def __init__(self, workers: Supervisor) -> None:
        self._workers = workers

    def collect(self) -> Iterable[Metric]:
        failing = set(self._workers.failing())
        family = GaugeMetricFamily(
            "ipvsproxy_worker_up",
            "Whether each of the daemon's threads runs (1) or cannot (0: it keeps failing)",
            labels=["worker"],
        )
        for name in sorted(set(self._workers.running())):
            family.add_metric([name], 0 if name in failing else 1)
        yield family


class _Http(Collector):
    """What the HTTP servers hold and had to let go, read at scrape time."""

    def __init__(self, hub: HttpHub) -> None:
        self._hub = hub

    def collect(self) -> Iterable[Metric]:
        yield GaugeMetricFamily(
            "ipvsproxy_http_connections",
            "Connections the HTTP servers hold now",
            value=self._hub.connections,
        )
        dropped = CounterMetricFamily(
            "ipvsproxy_http_connections_dropped",
            "Connections closed before their answer was taken, by reason (evicted: the oldest "
            "idle one, for a new one or for want of descriptors; refused: at the limit; timeout)",
            labels=["reason"],
        )
        for reason in DROP_REASONS:
            dropped.add_metric([reason], self._hub.dropped[reason])
        yield dropped
        yield CounterMetricFamily(
            "ipvsproxy_http_accept_pauses",
            "Pauses of accepting connections for want of file descriptors",
            value=self._hub.accept_pauses,
        )


class _Programmed(Collector):
    """What the last sync programmed, counted at scrape time (a sync never pays for it)."""

    def __init__(self, desired: Callable[[], DesiredState | None]) -> None:
        self._desired = desired

    def collect(self) -> Iterable[Metric]:
        desired = self._desired()
        if desired is None:
            return
        yield GaugeMetricFamily(
            "ipvsproxy_virtual_servers",
            "IPVS virtual servers the last sync wanted",
            value=len(desired.virtual_servers),
        )
        yield GaugeMetricFamily(
            "ipvsproxy_real_servers",
            "IPVS real servers (endpoints) of those virtual servers",
            value=sum(len(wanted.real_servers) for wanted in desired.virtual_servers.values()),
        )
        yield GaugeMetricFamily(
            "ipvsproxy_bound_addresses",
            "Addresses bound on kube-ipvs0",
            value=len(desired.bound_addresses),
        )


class Metrics:
    """Every metric of the daemon, in a registry of its own."""

    def __init__(self, traffic: TrafficSource | None = None) -> None:
        self.registry = registry = CollectorRegistry(auto_describe=True)
        # process_* (memory, CPU, descriptors), python_info and python_gc_*, as every Go
        # component's process_* and go_* are there for the same dashboards.
        for default in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            registry.register(default)
        Gauge(
            "ipvsproxy_build_info",
            "ipvsproxy's version and the Python running it (always 1)",
            ["version", "python_version"],
            registry=registry,
        ).labels(version=__version__, python_version=platform.python_version()).set(1)
        self.sync_duration = Histogram(
            "kubeproxy_sync_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds",
            buckets=SYNC_BUCKETS,
            registry=registry,
        )
        self.full_sync_duration = Histogram(
            "kubeproxy_sync_full_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds for full resyncs",
            buckets=SYNC_BUCKETS,
            registry=registry,
        )
        self.partial_sync_duration = Histogram(
            "kubeproxy_sync_partial_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds for partial resyncs",
            buckets=SYNC_BUCKETS,
            registry=registry,
        )
        self.last_full_sync = Gauge(
            "ipvsproxy_full_sync_last_timestamp_seconds",
            "The last time a full sync (the kernel read whole, drift repaired) finished",
            registry=registry,
        )
        self.last_sync = Gauge(
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
            "The last time proxy rules were successfully synced",
            registry=registry,
        )
        self.last_queued = Gauge(
            "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
            "The last time a sync of proxy rules was queued",
            registry=registry,
        )
        self.network_programming = Histogram(
            "kubeproxy_network_programming_duration_seconds",
            "In Network Programming Latency in seconds",
            buckets=NETWORK_PROGRAMMING_BUCKETS,
            registry=registry,
        )
        self.endpoint_changes_pending = Gauge(
            "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
            "Pending proxy rules Endpoint changes",
            registry=registry,
        )
        self.endpoint_changes = Counter(
            "kubeproxy_sync_proxy_rules_endpoint_changes",
            "Cumulative proxy rules Endpoint changes",
            registry=registry,
        )
        self.service_changes_pending = Gauge(
            "kubeproxy_sync_proxy_rules_service_changes_pending",
            "Pending proxy rules Service changes",
            registry=registry,
        )
        self.service_changes = Counter(
            "kubeproxy_sync_proxy_rules_service_changes",
            "Cumulative proxy rules Service changes",
            registry=registry,
        )
        self.no_local_endpoints = _NoLocalEndpoints()
        registry.register(self.no_local_endpoints)
        self.iptables_restore_failures = Counter(
            "kubeproxy_sync_proxy_rules_iptables_restore_failures",
            "Cumulative proxy iptables restore failures",
            registry=registry,
        )
        self.healthz = Counter(
            "kubeproxy_proxy_healthz",
            "Cumulative proxy healthz HTTP status",
            ["code"],
            registry=registry,
        )
        self.livez = Counter(
            "kubeproxy_proxy_livez",
            "Cumulative proxy livez HTTP status",
            ["code"],
            registry=registry,
        )
        self.kernel_operations = Counter(
            "ipvsproxy_kernel_operations",
            "Kernel operations applied, by kind of operation and result",
            ["kind", "result"],
            registry=registry,
        )
        self.drift_repairs = Counter(
            "ipvsproxy_drift_repairs",
            "Kernel objects changed behind the proxy's back and repaired, by kind",
            ["kind"],
            registry=registry,
        )
        self.watch_restarts = Counter(
            "ipvsproxy_watch_restarts",
            "Watches of the API server started again after ending or failing",
            ["resource"],
            registry=registry,
        )
        self.watch_malformed_events = Counter(
            "ipvsproxy_watch_malformed_events",
            "Lines of a watch stream that were no usable event (not JSON, nested too deep, "
            "the wrong shape, over 16 MiB), skipped",
            ["resource"],
            registry=registry,
        )
        self.relists = Counter(
            "ipvsproxy_relists",
            "Lists of a resource after the first (410 Gone)",
            ["resource"],
            registry=registry,
        )
        self.objects_skipped = Counter(
            "ipvsproxy_objects_skipped",
            "Objects (or parts of them) newly left out, by reason (invalid, duplicate, ...)",
            ["reason"],
            registry=registry,
        )
        self.real_servers_draining = Gauge(
            "ipvsproxy_real_servers_draining",
            "Real servers at weight 0 waiting for their connections to end",
            registry=registry,
        )
        self.syncs = Counter(
            "ipvsproxy_syncs",
            "Syncs, by mode (full or incremental) and result (ok; refused: only objects the "
            "kernel will not take failed, held in quarantine; failed; error)",
            ["mode", "result"],
            registry=registry,
        )
        self.quarantined = Counter(
            "ipvsproxy_objects_quarantined",
            "Objects put in quarantine because the kernel refused them, by kind and reason",
            ["kind", "reason"],
            registry=registry,
        )
        self.in_quarantine = _InQuarantine()
        registry.register(self.in_quarantine)
        self.events = Counter(
            "ipvsproxy_events",
            "Kubernetes Events about Services, by what became of them "
            "(created, patched, filtered, dropped, failed)",
            ["result"],
            registry=registry,
        )
        self.worker_failures = Counter(
            "ipvsproxy_worker_failures",
            "Failures of the daemon's threads, each restarted after a delay, by worker",
            ["worker"],
            registry=registry,
        )
        # Counted from 0, not from their first event: a series that appears at 1 shows no
        # increase() and no rate(), and the alerts on it would never fire.
        for reason in SkipReason:
            self.objects_skipped.labels(reason=reason.value)
        for kind in DRIFT_KINDS:
            self.drift_repairs.labels(kind=kind)
        for mode in ("full", "incremental"):
            for result in SYNC_RESULTS:
                self.syncs.labels(mode=mode, result=result)
        self._traffic = traffic

    def worker_failed(self, name: str) -> None:
        self.worker_failures.labels(worker=name).inc()

    def watch_workers(self, workers: Supervisor) -> None:
        self.registry.register(_Workers(workers))

    def watch_http(self, hub: HttpHub) -> None:
        self.registry.register(_Http(hub))

    def watch_programmed(self, desired: Callable[[], DesiredState | None]) -> None:
        self.registry.register(_Programmed(desired))

    def counted(self, counter: Counter, handler: Callable[[], Response]) -> Callable[[], Response]:
        """``handler``, counting each answer's status code in ``counter``."""

        def answer() -> Response:
            response = handler()
            counter.labels(code=str(response.status)).inc()
            return response

        return answer

    def response(self) -> Response:
        if self._traffic is None:
            return Response(200, CONTENT_TYPE_LATEST, generate_latest(self.registry))
        body = io.BytesIO()
        body.write(generate_latest(self.registry))
        write_text(body, totals(*self._traffic()))
        return Response(200, CONTENT_TYPE_LATEST, body.getvalue())
