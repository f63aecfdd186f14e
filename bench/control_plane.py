"""Control-plane cost without the kernel: decode, parse, translate and diff a whole cluster.

Runs outside the lab on the in-memory fake kernel, which already holds the cluster (the
steady state a daemon resyncs against), and prints one JSON object: CPU seconds per stage
and size. ``python -m bench.control_plane --sizes 1000,10000``.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from bench.cluster import NODE_NAME, as_list, cluster_objects
from ipvsproxy.cluster.parse import snapshot_from_objects
from ipvsproxy.gcpause import decode_json
from ipvsproxy.kernel.testing import FakeKernel
from ipvsproxy.reconcile.reconciler import Reconciler
from ipvsproxy.translate import Settings, translate


def measure(services: int) -> dict[str, Any]:
    text = json.dumps(as_list(cluster_objects(services)))
    reconciler = Reconciler(FakeKernel().kernel())
    start = time.process_time()
    objects = decode_json(text)["items"]
    decoded = time.process_time()
    snapshot, _ = snapshot_from_objects(objects, NODE_NAME)
    parsed = time.process_time()
    desired = translate(snapshot, Settings())
    translated = time.process_time()
    first = reconciler.sync(desired)
    applied = time.process_time()
    resync = reconciler.plan(desired)
    done = time.process_time()
    assert first.ok and not resync.changes(), "the fake kernel did not take the cluster"
    return {
        "decode_cpu_s": decoded - start,
        "parse_cpu_s": parsed - decoded,
        "translate_cpu_s": translated - parsed,
        "first_sync_fake_cpu_s": applied - translated,
        "diff_cpu_s": done - applied,
        "translate_diff_cpu_s": (translated - start) + (done - applied),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1000,5000,10000")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    print(json.dumps({str(size): measure(size) for size in sizes}, indent=2))


if __name__ == "__main__":
    main()
