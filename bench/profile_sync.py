"""Where a sync's time goes: each kernel call timed, and a cProfile of the Python around them.

Inside the lab (``python -m tests.lab --run python -m bench.profile_sync MANIFEST OUT``) the
real kernel is used, so the call timings show kernel round trips and subprocesses; with
``--fake`` the in-memory kernel, which leaves only our own CPU time, profiled by cProfile.
Writes OUT: for loading, a first sync, a no-op resync and a no-op resync as the daemon's
periodic full sync makes it (its interleaved read, then the rest, which holds changes back),
wall and CPU seconds, per kernel call too, and with ``--fake`` the top functions.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.cluster import NODE_NAME
from bench.lab_scale import fresh_namespace
from ipvsproxy.cluster.parse import snapshot_from_objects
from ipvsproxy.kernel.bundle import real_kernel
from ipvsproxy.kernel.protocols import Kernel
from ipvsproxy.kernel.testing import FakeKernel
from ipvsproxy.reconcile.reconciler import Reconciler, iptables_families
from ipvsproxy.reconcile.state import KernelState
from ipvsproxy.translate import Settings, translate

Totals = dict[str, list[float]]


class Timed:
    """Stands for one kernel part; every method call adds its wall and CPU time to ``totals``."""

    def __init__(self, name: str, inner: object, totals: Totals) -> None:
        self._name, self._inner, self._totals = name, inner, totals

    def __getattr__(self, method: str) -> Callable[..., Any]:
        call = getattr(self._inner, method)

        def timed(*args: Any, **kwargs: Any) -> Any:
            start, cpu = time.perf_counter(), time.process_time()
            try:
                return call(*args, **kwargs)
            finally:
                entry = self._totals[f"{self._name}.{method}"]
                entry[0] += time.perf_counter() - start
                entry[1] += time.process_time() - cpu
                entry[2] += 1

        return timed


def timed_kernel(kernel: Kernel, totals: Totals) -> Kernel:
    parts = ("ipvs", "addresses", "ipsets", "iptables", "sysctl", "conntrack")
    return Kernel(*(Timed(part, getattr(kernel, part), totals) for part in parts))


@contextmanager
def _kernel(fake: bool) -> Iterator[Kernel]:
    if fake:
        yield FakeKernel().kernel()
        return
    # A namespace nobody used: an empty kernel, whatever ran in this boot before.
    with fresh_namespace("profile-sync"), real_kernel() as kernel:
        yield kernel


def _profiled(action: Callable[[], object], lines: list[str], title: str, profile: bool) -> None:
    """Time ``action``; with ``profile``, under cProfile, whose clock calls are system calls
    in UML and so cost there far more than the code they measure: outside the lab only."""
    profiler = cProfile.Profile() if profile else None
    start, cpu = time.perf_counter(), time.process_time()
    if profiler is None:
        action()
    else:
        profiler.runcall(action)
    under = " (under cProfile)" if profiler else ""
    lines.append(
        f"## {title}: {time.perf_counter() - start:.2f} s wall, "
        f"{time.process_time() - cpu:.2f} s CPU{under}"
    )
    if profiler is not None:
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(35)
        lines.append(text.getvalue())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("manifest", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--fake", action="store_true", help="the in-memory kernel")
    args = parser.parse_args()
    lines: list[str] = []
    desired = None

    def read() -> None:
        nonlocal desired
        # json, not --source's loader: only the cost after parsing is of interest here.
        objects = json.loads(args.manifest.read_text())["items"]
        snapshot, _ = snapshot_from_objects(objects, NODE_NAME)
        desired = translate(snapshot, Settings())

    _profiled(read, lines, "load + translate", args.fake)
    with _kernel(args.fake) as kernel:
        totals: Totals = defaultdict(lambda: [0.0, 0.0, 0])
        reconciler = Reconciler(timed_kernel(kernel, totals))
        assert desired is not None
        wanted = desired
        observed: list[KernelState] = []

        def interleaved_read() -> None:
            observed.append(
                reconciler.observe(tuple, lambda: wanted.virtual_servers, iptables_families(wanted))
            )

        steps: list[tuple[str, Callable[[], object]]] = [
            ("first sync", lambda: reconciler.sync(wanted)),
            ("resync", lambda: reconciler.sync(wanted)),
            # A periodic full sync of the daemon: the read lets syncs through (none here),
            # then the rest holds them back.
            ("full sync's interleaved read", interleaved_read),
            ("full sync's rest (plan, apply)", lambda: reconciler.sync(wanted, observed[-1])),
        ]
        for name, step in steps:
            totals.clear()
            _profiled(step, lines, name, args.fake)
            lines.append(f"### {name}: kernel calls (wall s, CPU s, calls)")
            for call, (wall, cpu, count) in sorted(totals.items(), key=lambda kv: -kv[1][0]):
                lines.append(f"{call:32} {wall:8.3f} {cpu:8.3f} {count:6.0f}")
            lines.append("")
    args.out.write_text("\n".join(lines))


if __name__ == "__main__":
    main()
