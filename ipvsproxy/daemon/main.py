"""``ipvsproxy run``: build the daemon from the configuration, run it until a signal."""

from __future__ import annotations

import logging
import resource
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from types import FrameType

from ipvsproxy.cluster.connection import ApiError, connect
from ipvsproxy.cluster.events import ApiEventSink
from ipvsproxy.cluster.informer import ClusterInformer
from ipvsproxy.config import ProxyConfig, parse_bind_address, reconciler_settings
from ipvsproxy.daemon.daemon import Daemon, DaemonOptions, ServeError
from ipvsproxy.daemon.errors import DaemonError
from ipvsproxy.daemon.heap import map_big_allocations
from ipvsproxy.daemon.http import HttpLimits
from ipvsproxy.daemon.logs import configure
from ipvsproxy.daemon.sources import ApiSource, ClusterSource, FileSource
from ipvsproxy.kernel.bundle import real_kernel
from ipvsproxy.kernel.errors import PreconditionError
from ipvsproxy.kernel.ipvs import NetlinkIPVS
from ipvsproxy.kernel.preconditions import check_schedulers, require_net_admin
from ipvsproxy.model import VirtualServerState

log = logging.getLogger(__name__)


def _address(text: str, flag: str) -> tuple[str, int] | None:
    """A bind address, or None for port 0 (off)."""
    try:
        host, port = parse_bind_address(text)
    except ValueError as error:
        raise DaemonError(f"{flag}: {error}") from None
    return (host, port) if port else None


def _read_ipvs_counters() -> Iterator[VirtualServerState]:
    # A socket of its own: scrapes come from HTTP threads while the sync loop uses its own.
    # The metrics are per virtual server: one request, none per virtual server for its
    # real servers, each decoded as the metrics reach it.
    with NetlinkIPVS() as ipvs:
        yield from ipvs.listed()


def raise_open_files_limit() -> int:
    """Raise the soft limit of open files to the hard one, as Go's runtime does at start (so
    kube-proxy runs with it): systemd's soft 1024 is far below what a busy node needs. The
    soft limit in force after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (OSError, ValueError) as error:
            log.warning("cannot raise the open files limit from %d to %d: %s", soft, hard, error)
            return soft
    # Linux has no unlimited NOFILE in practice (nr_open caps it), but say what it would mean.
    return sys.maxsize if hard == resource.RLIM_INFINITY else hard


def options_from(config: ProxyConfig, *, traffic_metrics: bool, open_files: int) -> DaemonOptions:
    return DaemonOptions(
        node_name=config.hostname,
        sync_period=config.sync_period,
        min_sync_period=config.min_sync_period,
        healthz=_address(config.healthz_bind_address, "--healthz-bind-address"),
        metrics=_address(config.metrics_bind_address, "--metrics-bind-address"),
        traffic=_read_ipvs_counters if traffic_metrics else None,
        reconciler=reconciler_settings(config),
        http=HttpLimits.for_open_files(open_files),
    )


def _serving(daemon: Daemon) -> Daemon:
    try:
        daemon.serve()
    except ServeError as error:
        raise DaemonError(str(error)) from None
    return daemon


def stop_on_signals(stop: threading.Event) -> None:
    def handle(signum: int, _: FrameType | None) -> None:
        log.info("received %s", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)


def serve_daemon(
    config: ProxyConfig,
    source_path: Path | None,
    verbosity: int,
    *,
    traffic_metrics: bool,
    warnings: Sequence[str] = (),
) -> None:
    configure(config.logging_format, verbosity)
    map_big_allocations()
    for warning in warnings:
        log.warning(warning)
    options = options_from(
        config, traffic_metrics=traffic_metrics, open_files=raise_open_files_limit()
    )
    stop = threading.Event()
    stop_on_signals(stop)
    with ExitStack() as stack:
        try:
            require_net_admin()
            kernel = stack.enter_context(real_kernel())
            check_schedulers(kernel.ipvs, {config.settings.scheduler})
        except PreconditionError as error:
            raise DaemonError(str(error)) from None
        source: ClusterSource
        if source_path is not None:
            # No API: what would be an Event is a log line only.
            daemon = _serving(Daemon(kernel, config.settings, options))
            source = FileSource(
                source_path,
                config.hostname,
                on_change=daemon.changed,
                max_file_size=config.source_max_file_size,
                workers=daemon.workers,
            )
        else:
            try:
                api = connect(config.kubeconfig, config.master or None)
            except ApiError as error:
                raise DaemonError(str(error)) from None
            daemon = _serving(Daemon(kernel, config.settings, options, ApiEventSink(api)))
            informer = ClusterInformer(
                api,
                config.hostname,
                service_proxy_name=config.settings.service_proxy_name,
                hooks=daemon.informer_hooks(),
                workers=daemon.workers,
            )
            source = ApiSource(informer)
        log.info(
            "starting",
            extra={"node": config.hostname, "source": str(source_path or "api")},
        )
        daemon.run(source, stop)
