"""CPU of one incremental daemon sync after one change, against cluster size (no kernel).

A ``Syncer`` on the in-memory fake kernel holds a generated cluster (N services x 10
endpoints, fully synced); each change is one of: an EndpointSlice with one endpoint
replaced, a Service added with its slice, a Service deleted with its slice. Each change's
``Syncer.sync`` is timed in CPU seconds (``time.process_time``), and the sizes take turns
change by change, so that a noisy neighbour on a shared machine weighs on every size alike.
Prints one JSON object: p50 and max milliseconds per size and kind.

``python -m bench.incremental_sync --sizes 1000,10000 --changes 100``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from bench.cluster import (
    ENDPOINTS_PER_SERVICE,
    NODE_NAME,
    cluster_objects,
    endpoint_slice_object,
    service_object,
)
from ipvsproxy.cluster.parse import (
    object_key,
    parse_endpoint_slice,
    parse_service,
    snapshot_from_objects,
)
from ipvsproxy.daemon.syncer import Syncer, SyncMode
from ipvsproxy.kernel.testing import FakeKernel
from ipvsproxy.model import ChangedKeys, ObjectKey
from ipvsproxy.translate import Settings

CHANGE_KINDS = ("endpoint_changed", "service_added", "service_deleted")
# Sync period long enough that no change is timed as a full sync.
SYNC_PERIOD = 1e9


def _with(
    mapping: Mapping[ObjectKey, Any], key: ObjectKey, value: Any | None
) -> dict[ObjectKey, Any]:
    changed = dict(mapping)
    if value is None:
        changed.pop(key, None)
    else:
        changed[key] = value
    return changed


class Cluster:
    """One size: the syncer, its current snapshot, and the next change of each kind."""

    def __init__(self, services: int) -> None:
        self.services = services
        snapshot, _ = snapshot_from_objects(cluster_objects(services), NODE_NAME)
        self.snapshot = snapshot
        self.syncer = Syncer(FakeKernel().kernel(), Settings(), SYNC_PERIOD)
        first = self.syncer.sync(snapshot, [])
        assert first.mode is SyncMode.FULL and first.result.ok
        self._changed = 0
        self._added = services
        self.changed: ChangedKeys | None = None

    def _apply(
        self,
        service: dict[str, Any] | None,
        endpoint_slice: dict[str, Any],
        delete: bool = False,
    ) -> None:
        snapshot = self.snapshot
        services = snapshot.services
        touched: set[ObjectKey] = set()
        if service is not None:
            parsed, _ = parse_service(service)
            assert parsed is not None
            services = _with(services, parsed.key, None if delete else parsed)
            touched.add(parsed.key)
        parsed_slice, _ = parse_endpoint_slice(endpoint_slice)
        assert parsed_slice is not None
        key = object_key(endpoint_slice)
        slices = _with(snapshot.endpoint_slices, key, None if delete else parsed_slice)
        self.snapshot = replace(snapshot, services=services, endpoint_slices=slices)
        # As the informer names them.
        self.changed = ChangedKeys(frozenset(touched), frozenset({key}))

    def change(self, kind: str) -> None:
        """Turn the snapshot into the next change of ``kind``; the syncer has not seen it."""
        if kind == "endpoint_changed":
            # A prime stride visits every service once before any twice.
            index = self._changed * 7919 % self.services
            rounds = 1 + self._changed // self.services
            self._changed += 1
            # Shifted by one pod: one endpoint gone, one new.
            first = index * ENDPOINTS_PER_SERVICE + rounds
            self._apply(None, endpoint_slice_object(index, first_pod=first))
        elif kind == "service_added":
            index = self._added
            self._added += 1
            self._apply(service_object(index), endpoint_slice_object(index))
        else:
            index = self._added - 1
            self._added -= 1
            self._apply(service_object(index), endpoint_slice_object(index), delete=True)

    def timed_sync(self) -> float:
        """CPU seconds of one sync of the current snapshot."""
        start = time.process_time()
        report = self.syncer.sync(self.snapshot, [], self.changed)
        spent = time.process_time() - start
        assert report.mode is SyncMode.INCREMENTAL and report.result.ok, report
        assert report.result.writes, "the change wrote nothing"
        return spent


def _summary(samples: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(statistics.median(samples) * 1000, 3),
        "max_ms": round(max(samples) * 1000, 3),
    }


def measure(sizes: list[int], changes: int) -> dict[str, Any]:
    clusters = [Cluster(size) for size in sizes]
    samples: dict[int, dict[str, list[float]]] = {
        size: {kind: [] for kind in CHANGE_KINDS} for size in sizes
    }
    order: list[Callable[[], None]] = []
    for _ in range(changes):
        for kind in CHANGE_KINDS:
            for cluster in clusters:
                order.append(lambda c=cluster, k=kind: _one(c, k, samples))
    for step in order:
        step()
    return {
        str(size): {
            kind: _summary(found)
            for kind, found in {
                **samples[size],
                "all": [s for kind_samples in samples[size].values() for s in kind_samples],
            }.items()
        }
        for size in sizes
    }


def _one(cluster: Cluster, kind: str, samples: dict[int, dict[str, list[float]]]) -> None:
    cluster.change(kind)
    samples[cluster.services][kind].append(cluster.timed_sync())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--changes", type=int, default=100, help="changes of each kind per size")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    print(json.dumps(measure(sizes, args.changes), indent=2))


if __name__ == "__main__":
    main()
