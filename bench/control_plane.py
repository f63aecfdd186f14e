"""Control-plane cost without the kernel: decode, parse, translate and diff a whole cluster.

Runs outside the lab on the in-memory fake kernel, which already holds the cluster (the
steady state a daemon resyncs against), and prints one JSON object: CPU seconds per stage
and size, the median of ``--runs`` with their spread and samples (a figure of one run moved
by a tenth between runs on the same host). ``python -m bench.control_plane --sizes 1000,10000``.

Decoding and parsing are as an informer's list does them, inside one pause of the cyclic
collector that ends with the collection and freeze of what was parsed; translation and the
diff as the daemon's full sync does them, inside one pause that ends with the collection and
freeze of what survives (``freeze_survivors``), whose CPU is counted too. The
fake kernel's table, which a node keeps in the kernel, and the state read from it are made and
frozen before the clock starts: reading the real kernel is the lab's "reconciler no-op resync",
and the collection here walks only what the daemon's Python heap would hold.
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from typing import Any

from bench.cluster import NODE_NAME, as_list, cluster_objects
from bench.spread import median_spread
from ipvsproxy.cluster.parse import snapshot_from_objects
from ipvsproxy.gcpause import cyclic_gc_paused, decode_json, freeze_survivors
from ipvsproxy.kernel.testing import FakeKernel
from ipvsproxy.reconcile.reconciler import Reconciler, iptables_families
from ipvsproxy.reconcile.state import KernelState
from ipvsproxy.translate import Settings, translate


def _steady_kernel(text: str) -> tuple[Reconciler, KernelState]:
    """A reconciler over a fake kernel that holds the cluster, and the state read from it,
    out of the collector's sight."""
    reconciler = Reconciler(FakeKernel().kernel())
    snapshot, _ = snapshot_from_objects(decode_json(text)["items"], NODE_NAME)
    desired = translate(snapshot, Settings())
    assert reconciler.sync(desired).ok, "the fake kernel refused the cluster"
    actual = reconciler.observe(iptables=iptables_families(desired))
    freeze_survivors()
    return reconciler, actual


def measure(services: int) -> dict[str, Any]:
    text = json.dumps(as_list(cluster_objects(services)))
    reconciler, actual = _steady_kernel(text)
    start = time.process_time()
    with cyclic_gc_paused():
        objects = decode_json(text)["items"]
        decoded = time.process_time()
        snapshot, _ = snapshot_from_objects(objects, NODE_NAME)
        del objects  # an informer keeps only what it parsed
        # As an informer's list ends: what it parsed is collected once and frozen.
        freeze_survivors()
    parsed = time.process_time()
    with cyclic_gc_paused():
        desired = translate(snapshot, Settings())
        translated = time.process_time()
        resync = reconciler.plan(desired, actual)
        diffed = time.process_time()
        freeze_survivors()
        done = time.process_time()
    assert not resync.changes(), "the fake kernel did not hold the cluster"
    gc.unfreeze()
    return {
        "decode_cpu_s": decoded - start,
        "parse_cpu_s": parsed - decoded,
        "translate_cpu_s": translated - parsed,
        "diff_cpu_s": diffed - translated,
        "collect_cpu_s": done - diffed,
        "translate_diff_cpu_s": done - start,
    }


def measure_runs(services: int, runs: int) -> dict[str, Any]:
    """Each stage's median over ``runs``, with ``_min``, ``_max`` and the samples."""
    samples = [measure(services) for _ in range(runs)]
    figures: dict[str, Any] = {}
    for name in samples[0]:
        figures |= median_spread(name, [sample[name] for sample in samples])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1000,5000,10000")
    parser.add_argument("--runs", type=int, default=5, help="runs per size (5)")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    print(json.dumps({str(size): measure_runs(size, args.runs) for size in sizes}, indent=2))


if __name__ == "__main__":
    main()
