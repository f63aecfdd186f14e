"""kube-proxy's proxier health: /healthz and /livez, and whether this node should get traffic.

* A sync is queued when the cluster changes and done when it is written. Once it has synced
  at least once, the proxy is unhealthy while the oldest update still queued is older than the
  health timeout (kube-proxy uses twice the sync period): the loop is stuck or failing. Until
  its first sync it is healthy, as kube-proxy is while starting up.
* Both are 503 while a worker thread of the daemon cannot run (it keeps failing, or ended):
  the kubelet's liveness probe then restarts the pod, which a thread's restart could not fix.
* /healthz is also 503 while the Node is being deleted or carries the cluster autoscaler's
  ToBeDeletedByClusterAutoscaler taint, so load balancers drain the node first; /livez is not.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Collection
from datetime import UTC, datetime

from ipvsproxy.daemon.http import Response
from ipvsproxy.model import Node

TO_BE_DELETED_TAINT = "ToBeDeletedByClusterAutoscaler"
JSON = "application/json"


def node_eligible(node: Node | None) -> bool:
    """Whether load balancers should send this node traffic; an unknown node is eligible."""
    return node is None or not (node.deleting or TO_BE_DELETED_TAINT in node.taints)


def _go_time(timestamp: float) -> str:
    """A wall-clock time as Go's time.String() prints it, which kube-proxy's body carries."""
    moment = datetime.fromtimestamp(timestamp, UTC)
    return f"{moment:%Y-%m-%d %H:%M:%S}.{int(timestamp % 1 * 1e9):09d} +0000 UTC"


class ProxierHealth:
    """Thread-safe: the sync loop reports, the HTTP threads ask."""

    def __init__(
        self,
        timeout: float,
        clock: Callable[[], float] = time.time,
        failing: Callable[[], Collection[str]] = tuple,
    ) -> None:
        self._timeout = timeout
        self._clock = clock
        self._failing = failing
        self._lock = threading.Lock()
        self._last_updated: float | None = None
        self._oldest_queued: float | None = None
        # When the running sync read the cluster, and the first update queued since: a change
        # that arrives during a sync is not in it, and stays queued once the sync is done.
        self._sync_began: float | None = None
        self._queued_during_sync: float | None = None
        self._node_eligible = True

    def queued_update(self) -> None:
        with self._lock:
            now = self._clock()
            if self._oldest_queued is None:
                self._oldest_queued = now
            if self._sync_began is not None and self._queued_during_sync is None:
                self._queued_during_sync = now

    def sync_began(self) -> None:
        """A sync is about to read the cluster: what was queued so far is in it."""
        with self._lock:
            self._sync_began = self._clock()
            self._queued_during_sync = None

    def updated(self) -> None:
        """The sync that began last is written; what was queued during it still waits. A sync
        that ends after one that began inside it (a full sync, after the incremental ones it
        made while reading the kernel) read the cluster earlier: what waits still waits."""
        with self._lock:
            self._last_updated = self._clock()
            if self._sync_began is not None:
                self._oldest_queued = self._queued_during_sync
            self._sync_began = None
            self._queued_during_sync = None

    def set_node(self, node: Node | None) -> None:
        with self._lock:
            self._node_eligible = node_eligible(node)

    def _state(self) -> tuple[bool, float, float, bool]:
        """(healthy, lastUpdated, currentTime, nodeEligible) as kube-proxy reports them: while
        healthy, lastUpdated is the current time (what older releases meant by it)."""
        failing = bool(self._failing())
        with self._lock:
            now = self._clock()
            last, queued = self._last_updated, self._oldest_queued
            healthy = not failing and (
                last is None or queued is None or now - queued < self._timeout
            )
            return healthy, now if healthy else (last or 0.0), now, self._node_eligible

    def healthz(self) -> Response:
        healthy, last, now, eligible = self._state()
        body = {
            "lastUpdated": _go_time(last),
            "currentTime": _go_time(now),
            "nodeEligible": eligible,
        }
        return Response(200 if healthy and eligible else 503, JSON, json.dumps(body).encode())

    def livez(self) -> Response:
        healthy, last, now, _ = self._state()
        body = {"lastUpdated": _go_time(last), "currentTime": _go_time(now)}
        return Response(200 if healthy else 503, JSON, json.dumps(body).encode())
