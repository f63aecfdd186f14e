"""Which services changed between two snapshots of the cluster (pure).

Objects are parsed once and kept, so an unchanged object is the same object in both
snapshots and costs one identity check; a relisted one compares equal by value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from ipvsproxy.model import ClusterSnapshot, ObjectKey

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Changes:
    # Services whose Service object or any of whose EndpointSlices changed.
    services: frozenset[ObjectKey]
    service_objects: int
    endpoint_slice_objects: int
    # The Node changed: NodePorts, local endpoints and topology may all differ.
    node: bool
    # When the changes behind the changed slices happened (their trigger-time annotation).
    trigger_times: tuple[float, ...] = ()

    @property
    def any(self) -> bool:
        return bool(self.services) or self.node


def _changed(before: Mapping[ObjectKey, T], after: Mapping[ObjectKey, T]) -> list[ObjectKey]:
    changed = [k for k, old in before.items() if (new := after.get(k)) is not old and new != old]
    changed += [k for k in after if k not in before]
    return changed


def diff(before: ClusterSnapshot, after: ClusterSnapshot) -> Changes:
    services = _changed(before.services, after.services)
    slices = _changed(before.endpoint_slices, after.endpoint_slices)
    owners = {
        found.service
        for key in slices
        for found in (before.endpoint_slices.get(key), after.endpoint_slices.get(key))
        if found is not None
    }
    return Changes(
        services=frozenset(services) | owners,
        service_objects=len(services),
        endpoint_slice_objects=len(slices),
        node=before.node != after.node,
        trigger_times=tuple(
            found.trigger_time
            for key in slices
            if (found := after.endpoint_slices.get(key)) is not None
            and found.trigger_time is not None
        ),
    )


EMPTY_SNAPSHOT = ClusterSnapshot(services={}, endpoint_slices={})
