"""The daemon in the test process: its informer on an API server, its kernel the in-memory one
that records what it is asked, its /healthz, /livez and /metrics on loopback."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Collection
from dataclasses import dataclass
from ipaddress import ip_address
from typing import Any

from ipvsproxy.cluster.connection import ApiConnection
from ipvsproxy.cluster.events import ApiEventSink
from ipvsproxy.cluster.informer import Backoff, ClusterInformer
from ipvsproxy.daemon.daemon import Daemon, DaemonOptions
from ipvsproxy.daemon.sources import ApiSource
from ipvsproxy.model import SCHEDULERS, TransportProtocol, VirtualServerKey
from ipvsproxy.translate import Settings
from tests.api.kube import JsonObject, cluster_ip
from tests.daemon_kit import RecordingKernel

PATIENCE = 30.0


def eventually(predicate: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + PATIENCE
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def vip(stored_service: JsonObject, port: int = 80) -> VirtualServerKey:
    """The TCP virtual server of a Service as the API server stored it (its IP allocated)."""
    return VirtualServerKey(TransportProtocol.TCP, ip_address(cluster_ip(stored_service)), port)


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@dataclass
class Running:
    daemon: Daemon
    informer: ClusterInformer
    kernel: RecordingKernel
    healthz: int
    metrics: int

    def sample(self, name: str, **labels: str) -> float:
        value = self.daemon.metrics.registry.get_sample_value(name, labels)
        return value or 0.0


class Daemons:
    """Daemons started by one test, each on its own thread; ``stop`` ends them all."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(
        self,
        api: ApiConnection,
        node: str,
        sync_period: float = 30.0,
        schedulers: Collection[str] = SCHEDULERS,
        events: bool = False,
        **settings: Any,
    ) -> Running:
        """``schedulers``: those the in-memory kernel can load; ``events``: write Events to the
        API server through ``api``."""
        kernel = RecordingKernel(schedulers)
        options = DaemonOptions(
            sync_period=sync_period,
            min_sync_period=0.1,
            healthz=("127.0.0.1", 0),
            metrics=("127.0.0.1", 0),
            traffic=kernel.recording.fake.listed,
            tick=0.1,
            drain_check_period=0.2,
            health_check_host="127.0.0.1",
            node_name=node,
        )
        sink = ApiEventSink(api) if events else None
        daemon = Daemon(kernel.kernel(), Settings(**settings), options, sink)
        informer = ClusterInformer(
            api,
            node,
            watch_timeout=5,
            backoff=Backoff(0.05, 0.2),
            hooks=daemon.informer_hooks(),
            workers=daemon.workers,
        )
        daemon.serve()
        healthz, metrics = daemon.ports
        thread = threading.Thread(target=daemon.run, args=(ApiSource(informer), self._stop))
        thread.start()
        self._threads.append(thread)
        return Running(daemon, informer, kernel, healthz, metrics)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(PATIENCE)
            assert not thread.is_alive()
