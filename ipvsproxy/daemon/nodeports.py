"""Health-check node ports: for each externalTrafficPolicy=Local load balancer, an HTTP server
on its spec.healthCheckNodePort that tells the load balancer whether this node has endpoints,
on every address of the node, or under --nodeport-addresses on the addresses it selects.

As kube-proxy: 200 with the count when there are local ready endpoints, 503 when there are none.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Collection, Mapping
from functools import partial

from ipvsproxy.daemon.http import ANY_PATH, HttpHub, HttpListener, Response
from ipvsproxy.model import ClusterSnapshot, DesiredState, ObjectKey
from ipvsproxy.translate import Settings

log = logging.getLogger(__name__)


def local_endpoint_counts(
    snapshot: ClusterSnapshot, services: Collection[ObjectKey]
) -> dict[ObjectKey, int]:
    """For each of ``services``, how many distinct ready endpoint addresses are on this node."""
    node = snapshot.node.name if snapshot.node is not None else None
    local: dict[ObjectKey, set[str]] = {key: set() for key in services}
    if not local:
        # The common case, and every sync asks: no reading of every slice for nothing.
        return {}
    for endpoint_slice in snapshot.endpoint_slices.values():
        found = local.get(endpoint_slice.service)
        if found is None:
            continue
        for endpoint in endpoint_slice.endpoints:
            if endpoint.node_name == node and endpoint.conditions.ready:
                found.update(endpoint.addresses)
    return {key: len(addresses) for key, addresses in local.items()}


def health_check_hosts(settings: Settings, desired: DesiredState) -> list[str] | None:
    """Where health-check node ports listen, as kube-proxy decides: every address (None), or,
    under --nodeport-addresses, the node addresses it selects (all again if it names a /0)."""
    limited = settings.nodeport_primary or bool(settings.nodeport_addresses)
    if not limited or any(net.prefixlen == 0 for net in settings.nodeport_addresses):
        return None
    return sorted(str(address) for address in desired.node_port_addresses)


class HealthCheckNodePorts:
    """Listeners of ``hub`` for health-check node ports, opened, kept and closed by ``update``:
    one per port on ``host`` (all addresses by default), or, given ``hosts``, one per port on
    each of them (kube-proxy's way under --nodeport-addresses: the matching node addresses
    alone)."""

    def __init__(self, hub: HttpHub, host: str = "") -> None:
        self._hub = hub
        self._host = host
        self._lock = threading.Lock()
        self._counts: dict[ObjectKey, int] = {}
        self._servers: dict[tuple[ObjectKey, int, str], HttpListener] = {}

    @property
    def ports(self) -> dict[tuple[ObjectKey, int, str], HttpListener]:
        """Each server by service, port and host."""
        return dict(self._servers)

    def update(
        self,
        ports: Mapping[ObjectKey, int],
        counts: Mapping[ObjectKey, int],
        hosts: Collection[str] | None = None,
    ) -> None:
        with self._lock:
            self._counts = dict(counts)
        on = [self._host] if hosts is None else sorted(hosts)
        wanted = {(key, port, host) for key, port in ports.items() for host in on}
        for gone in [served for served in self._servers if served not in wanted]:
            self._servers.pop(gone).close()
        taken = {(port, host) for _, port, host in self._servers}
        for key, port, host in sorted(wanted - set(self._servers), key=str):
            if (port, host) in taken:
                log.warning("health check node port %d of %s is already served", port, key)
                continue
            try:
                server = self._hub.serve(host, port, {ANY_PATH: partial(self._answer, key)})
            except OSError as error:
                log.warning("health check node port %d of %s: %s", port, key, error.strerror)
                continue
            self._servers[(key, port, host)] = server
            taken.add((port, host))
            log.info("serving health checks of %s on %s port %d", key, host or "*", port)

    def stop(self) -> None:
        for server in self._servers.values():
            server.close()
        self._servers.clear()

    def _answer(self, key: ObjectKey) -> Response:
        with self._lock:
            count = self._counts.get(key, 0)
        body = {"service": {"namespace": key.namespace, "name": key.name}, "localEndpoints": count}
        return Response(200 if count else 503, "application/json", json.dumps(body).encode())
