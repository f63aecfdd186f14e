"""Which services changed between two snapshots of the cluster (pure).

Objects are parsed once and kept, so an unchanged object is the same object in both
snapshots and costs one identity check; a relisted one compares equal by value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from ipvsproxy.model import ChangedKeys, ClusterSnapshot, ObjectKey

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Changes:
    # Services whose Service object or any of whose EndpointSlices changed.
    services: frozenset[ObjectKey]
    service_objects: int
    endpoint_slices: frozenset[ObjectKey]
    # This Node or its interfaces' addresses changed (NodePorts, local endpoints and topology
    # may all differ), or which Node has which address (any service's address may now be
    # refused, or allowed).
    node: bool
    # When the changes behind the changed slices happened (their trigger-time annotation).
    trigger_times: tuple[float, ...] = ()

    @property
    def endpoint_slice_objects(self) -> int:
        return len(self.endpoint_slices)

    @property
    def any(self) -> bool:
        return bool(self.services) or self.node


NO_CHANGES = Changes(frozenset(), 0, frozenset(), node=False)


def combined(first: Changes, then: Changes) -> Changes:
    """The changes of two readings, one after the other, as one."""
    return Changes(
        services=first.services | then.services,
        service_objects=first.service_objects + then.service_objects,
        endpoint_slices=first.endpoint_slices | then.endpoint_slices,
        node=first.node or then.node,
        trigger_times=first.trigger_times + then.trigger_times,
    )


def _changed(
    before: Mapping[ObjectKey, T], after: Mapping[ObjectKey, T], candidates: Iterable[ObjectKey]
) -> list[ObjectKey]:
    return [
        key
        for key in candidates
        if (old := before.get(key)) is not (new := after.get(key)) and old != new
    ]


def diff(
    before: ClusterSnapshot, after: ClusterSnapshot, candidates: ChangedKeys | None = None
) -> Changes:
    """What changed; ``candidates``, when known, limits the comparison to those objects, so
    that it costs the change rather than the cluster."""
    if candidates is None:
        candidates = ChangedKeys(
            frozenset(before.services.keys() | after.services.keys()),
            frozenset(before.endpoint_slices.keys() | after.endpoint_slices.keys()),
        )
    services = _changed(before.services, after.services, candidates.services)
    slices = _changed(before.endpoint_slices, after.endpoint_slices, candidates.endpoint_slices)
    owners = {
        found.service
        for key in slices
        for found in (before.endpoint_slices.get(key), after.endpoint_slices.get(key))
        if found is not None
    }
    return Changes(
        services=frozenset(services) | owners,
        service_objects=len(services),
        endpoint_slices=frozenset(slices),
        node=before.node != after.node
        or before.local_addresses != after.local_addresses
        or (
            before.nodes_by_address is not after.nodes_by_address
            and before.nodes_by_address != after.nodes_by_address
        ),
        trigger_times=tuple(
            found.trigger_time
            for key in slices
            if (found := after.endpoint_slices.get(key)) is not None
            and found.trigger_time is not None
        ),
    )


EMPTY_SNAPSHOT = ClusterSnapshot(services={}, endpoint_slices={})
