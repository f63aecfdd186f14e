"""Which endpoints serve a service port on this node, as kube-proxy chooses them.

Matching by port name and family, merging slices, the ready / serving-terminating fallback,
node-local scoping and topology hints (pkg/proxy/topology.go).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable

from ipvsproxy.model import (
    Endpoint,
    EndpointSlice,
    IPAddress,
    IPFamily,
    RealServerKey,
    ServicePort,
)

HANDLED_ADDRESS_TYPES = {"IPv4": IPFamily.IPV4, "IPv6": IPFamily.IPV6}


class AddressCache:
    """Each Service address (cluster and external IPs) parsed once per translate, however many
    ports name it. Endpoint addresses come parsed (``Endpoint.first_address``).

    IPv4 goes through inet_pton, several times cheaper than ipaddress's parser and accepting
    exactly the same strings (four decimal octets, no leading zeros); anything else falls back
    to ipaddress, which stays the judge of what is rejected.
    """

    def __init__(self) -> None:
        self._parsed: dict[str, IPAddress | None] = {}

    def get(self, text: str) -> IPAddress | None:
        """The address, or None if ``text`` is not one."""
        # A miss is the common case (each Service has addresses of its own): test membership
        # rather than catch KeyError, whose raising costs more than the lookup.
        if text in self._parsed:
            return self._parsed[text]
        parsed: IPAddress | None
        try:
            parsed = ipaddress.IPv4Address(int.from_bytes(socket.inet_pton(socket.AF_INET, text)))
        except (OSError, ValueError):
            try:
                parsed = ipaddress.ip_address(text)
            except ValueError:
                parsed = None
        self._parsed[text] = parsed
        return parsed


# Candidates keyed by (address as int, port): hashing ints is far cheaper than hashing
# RealServerKey (whose ipaddress hash formats a hex string), and within one family the key
# sorts exactly as RealServerKey.sort_key does.
Candidates = dict[tuple[int, int], tuple[RealServerKey, Endpoint]]


def find_candidates(
    port: ServicePort, slices: Iterable[EndpointSlice], family: IPFamily
) -> Candidates:
    """Endpoints of one family for one port, matched by port name; duplicates counted once."""
    found: Candidates = {}
    for endpoint_slice in slices:
        if HANDLED_ADDRESS_TYPES.get(endpoint_slice.address_type) is not family:
            continue
        target = next(
            (
                p.port
                for p in endpoint_slice.ports
                if p.name == port.name and p.protocol is port.protocol and p.port
            ),
            None,
        )
        if target is None:
            continue
        for endpoint in endpoint_slice.endpoints:
            # Parsed by ``cluster``, of the slice's family: one address object per pod,
            # shared by its real servers.
            address = endpoint.first_address
            if address is None:
                continue
            dedupe = (int(address), target)
            if dedupe not in found:
                found[dedupe] = (RealServerKey(address, target), endpoint)
    return found


def _node_hints(endpoint: Endpoint) -> tuple[str, ...]:
    return endpoint.hints_for_nodes or ()


def _zone_hints(endpoint: Endpoint) -> tuple[str, ...]:
    return endpoint.hints_for_zones or ()


def _topology(
    candidates: Candidates, node_name: str | None, zone: str | None
) -> tuple[str, Callable[[Endpoint], tuple[str, ...]]] | None:
    """kube-proxy's topologyModeFromHints: the hint this node keeps endpoints by, if any.

    Node hints win when every ready endpoint has some and one names this node
    (PreferSameNode); else zone hints when every ready endpoint has some and one names our
    zone (PreferSameZone / PreferClose); else hints are ignored.
    """
    ready = [ep for _, ep in candidates.values() if ep.conditions.ready]
    for name, hints in ((node_name, _node_hints), (zone, _zone_hints)):
        if (
            name is not None
            and all(hints(ep) for ep in ready)
            and any(name in hints(ep) for ep in ready)
        ):
            return name, hints
    return None


def has_usable_endpoints(candidates: Candidates) -> bool:
    """kube-proxy's hasAnyEndpoints: an endpoint anywhere is ready, or serving and terminating."""
    return any(
        ep.conditions.ready or (ep.conditions.serving and ep.conditions.terminating)
        for _, ep in candidates.values()
    )


def choose_endpoints(
    candidates: Candidates,
    node_name: str | None,
    local_only: bool,
    zone: str | None,
) -> dict[RealServerKey, Endpoint]:
    """Ready endpoints in scope; failing those, serving+terminating ones; never the rest."""
    scoped = (
        {
            key: pair
            for key, pair in candidates.items()
            if node_name is not None and pair[1].node_name == node_name
        }
        if local_only
        else candidates
    )
    topology = None if local_only else _topology(scoped, node_name, zone)
    if topology is not None:
        name, hints = topology
        scoped = {key: pair for key, pair in scoped.items() if name in hints(pair[1])}
    chosen = [key for key, (_, ep) in scoped.items() if ep.conditions.ready]
    if not chosen:
        chosen = [
            key
            for key, (_, ep) in scoped.items()
            if ep.conditions.serving and ep.conditions.terminating
        ]
    chosen.sort()
    return dict(scoped[key] for key in chosen)
