"""Health-check node ports: for each externalTrafficPolicy=Local load balancer, an HTTP server
on its spec.healthCheckNodePort that tells the load balancer whether this node has endpoints.

As kube-proxy: 200 with the count when there are local ready endpoints, 503 when there are none.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Collection, Mapping
from functools import partial

from ipvsproxy.daemon.http import ANY_PATH, HttpServer, Response
from ipvsproxy.model import ClusterSnapshot, DesiredState, ObjectKey, ServiceType, TrafficPolicy

log = logging.getLogger(__name__)


def local_endpoint_counts(
    snapshot: ClusterSnapshot, services: Collection[ObjectKey]
) -> dict[ObjectKey, int]:
    """For each of ``services``, how many distinct ready endpoint addresses are on this node."""
    node = snapshot.node.name if snapshot.node is not None else None
    local: dict[ObjectKey, set[str]] = {key: set() for key in services}
    for endpoint_slice in snapshot.endpoint_slices.values():
        found = local.get(endpoint_slice.service)
        if found is None:
            continue
        for endpoint in endpoint_slice.endpoints:
            if endpoint.node_name == node and endpoint.conditions.ready:
                found.update(endpoint.addresses)
    return {key: len(addresses) for key, addresses in local.items()}


def no_local_endpoints(snapshot: ClusterSnapshot, desired: DesiredState) -> dict[str, int]:
    """kube-proxy's sync_proxy_rules_no_local_endpoints_total: services with a Local policy
    and ready endpoints, none of them on this node, by policy ("internal", "external")."""
    served = {wanted.owner.service for wanted in desired.virtual_servers.values()}
    local_policy = [
        service
        for key, service in snapshot.services.items()
        if key in served
        and TrafficPolicy.LOCAL
        in (service.internal_traffic_policy, service.external_traffic_policy)
    ]
    ready = {
        endpoint_slice.service
        for endpoint_slice in snapshot.endpoint_slices.values()
        if any(endpoint.conditions.ready for endpoint in endpoint_slice.endpoints)
    }
    local = local_endpoint_counts(snapshot, [service.key for service in local_policy])
    counts = {"internal": 0, "external": 0}
    for service in local_policy:
        if service.key not in ready or local[service.key]:
            continue
        counts["internal"] += service.internal_traffic_policy is TrafficPolicy.LOCAL
        external = service.type in (ServiceType.NODE_PORT, ServiceType.LOAD_BALANCER) or bool(
            service.external_ips
        )
        counts["external"] += external and service.external_traffic_policy is TrafficPolicy.LOCAL
    return counts


class HealthCheckNodePorts:
    """One HTTP server per health-check node port, started, kept and stopped by ``update``."""

    def __init__(self, host: str = "") -> None:
        self._host = host
        self._lock = threading.Lock()
        self._counts: dict[ObjectKey, int] = {}
        self._servers: dict[tuple[ObjectKey, int], HttpServer] = {}

    @property
    def ports(self) -> dict[ObjectKey, int]:
        return dict(self._servers)

    def update(self, ports: Mapping[ObjectKey, int], counts: Mapping[ObjectKey, int]) -> None:
        with self._lock:
            self._counts = dict(counts)
        wanted = set(ports.items())
        for gone in [served for served in self._servers if served not in wanted]:
            self._servers.pop(gone).stop()
        taken = {port for _, port in self._servers}
        for key, port in sorted(wanted - set(self._servers), key=lambda item: str(item[0])):
            if port in taken:
                log.warning("health check node port %d of %s is already served", port, key)
                continue
            try:
                server = HttpServer(self._host, port, {ANY_PATH: partial(self._answer, key)})
            except OSError as error:
                log.warning("health check node port %d of %s: %s", port, key, error.strerror)
                continue
            self._servers[(key, port)] = server.start()
            taken.add(port)
            log.info("serving health checks of %s on port %d", key, port)

    def stop(self) -> None:
        for server in self._servers.values():
            server.stop()
        self._servers.clear()

    def _answer(self, key: ObjectKey) -> Response:
        with self._lock:
            count = self._counts.get(key, 0)
        body = {"service": {"namespace": key.namespace, "name": key.name}, "localEndpoints": count}
        return Response(200 if count else 503, "application/json", json.dumps(body).encode())
