"""The scale benchmark's kernel figures, taken inside one lab boot, side by side with the tools.

``python -m tests.lab --run python -m bench.lab_scale --out FILE MANIFEST...`` (``nox -s bench``
does it). For each manifest, made by ``bench.cluster``, each step in a network namespace of its own
(an empty kernel, see ``fresh_namespace``):

* ``ipvsadm -R`` restoring the same virtual and real servers and ``ip -batch`` binding the same
  addresses, then ``ipvsadm -Sn`` reading that table back;
* ``ipvsproxy sync --once --source MANIFEST`` as processes (start included): a first sync
  into an empty kernel, then ``ONCE_RESYNCS`` resyncs that must write nothing, each followed by
  an ``ipvsadm -Sn`` of the same table;
* the reconciler in this process: a first sync and a resync (wall, CPU and writes);
* the daemon, when ``ipvsproxy run`` exists, watching a fake API server: one-change latencies
  and its peak RSS.

Absolute times in UML are slow and noisy; the ratios to the tools are what the report quotes.
Writes one JSON object to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.child_usage import ChildUsage, measured
from bench.cluster import NODE_NAME
from bench.daemon_latency import NO_FULL_SYNC, daemon_available, measure_daemon
from bench.spread import median_spread
from ipvsproxy.cluster.parse import snapshot_from_objects
from ipvsproxy.kernel.bundle import real_kernel
from ipvsproxy.model import DUMMY_INTERFACE, DesiredState
from ipvsproxy.reconcile.cleanup import remove_leftovers
from ipvsproxy.reconcile.reconciler import Reconciler
from ipvsproxy.translate import Settings, translate
from tests.lab.netns import inside, sh


def log(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def empty_kernel() -> None:
    """What a previous step left: our objects through cleanup, then anything ipvsadm added."""
    with real_kernel() as kernel:
        report = remove_leftovers(kernel.ipvs, kernel.addresses, kernel.ipsets, kernel.iptables)
    if report.failed:
        raise RuntimeError(f"cleanup failed: {report.failed}")
    subprocess.run(["ipvsadm", "-C"], check=True)
    subprocess.run(["ip", "link", "del", DUMMY_INTERFACE], stderr=subprocess.DEVNULL, check=False)


@contextmanager
def fresh_namespace(name: str) -> Iterator[None]:
    """Run the block, and what it starts, in a new network namespace; empty it after.

    IPVS keeps the real servers of a deleted virtual server in a trash list of its namespace
    for one to three minutes, and each real server added walks that whole list
    (ip_vs_trash_get_dest): a table restored right after an equal one was removed costs
    O(n^2), ipvsadm's as much as ours. In one namespace the step that came after another
    step's cleanup paid that and the first did not (at 5,000 services ipvsadm -R took 35 s
    into a fresh kernel, 184 s right after ipvsadm -C). A namespace nobody used has no trash.
    """
    sh("ip", "netns", "add", name)
    try:
        # A namespace's IPv4 tables appear with its first route: until then IPVS refuses
        # every IPv4 real server (EINVAL, the address type lookup finds no table).
        sh("ip", "-n", name, "link", "set", "lo", "up")
        with inside(name):
            try:
                yield
            finally:
                empty_kernel()
    finally:
        sh("ip", "netns", "del", name)


def ipvsadm_script(desired: DesiredState) -> str:
    flag = {"TCP": "-t", "UDP": "-u", "SCTP": "--sctp-service"}
    lines = []
    for key, wanted in desired.virtual_servers.items():
        service = f"{flag[key.protocol.name]} {key.address}:{key.port}"
        lines.append(f"-A {service} -s {wanted.server.scheduler}")
        lines += [
            f"-a {service} -r {real.key.address}:{real.key.port} -m -w {real.weight}"
            for real in wanted.real_servers.values()
        ]
    return "\n".join(lines) + "\n"


def ip_batch_script(desired: DesiredState) -> str:
    return "".join(
        f"address add {address}/{address.max_prefixlen} dev {DUMMY_INTERFACE}\n"
        for address in sorted(desired.bound_addresses, key=str)
    )


def timed_command(command: list[str], stdin: str | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(command, input=stdin, text=True, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def measure_tools(desired: DesiredState) -> dict[str, float]:
    restore = timed_command(["ipvsadm", "-R"], ipvsadm_script(desired))
    save = timed_command(["ipvsadm", "-Sn"])
    subprocess.run(["ip", "link", "add", DUMMY_INTERFACE, "type", "dummy"], check=True)
    batch = timed_command(["ip", "-batch", "-"], ip_batch_script(desired))
    return {"ipvsadm_restore_s": restore, "ipvsadm_save_s": save, "ip_batch_s": batch}


@dataclass(frozen=True)
class ProcessRun:
    usage: ChildUsage
    stdout: str


def timed_process(command: list[str]) -> ProcessRun:
    """One child process, which must exit 0, with its own wall time, CPU time and peak RSS."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as errors:
        usage = measured(command, stdout=out, stderr=errors)
        out.seek(0)
        errors.seek(0)
        if usage.exit_code != 0:
            raise RuntimeError(f"{command} failed: {errors.read()[-2000:]}")
        return ProcessRun(usage, out.read())


ONCE_RESYNCS = 3


def measure_once(manifest: Path) -> dict[str, Any]:
    command = [
        sys.executable,
        "-m",
        "ipvsproxy",
        "sync",
        "--once",
        "--source",
        str(manifest),
        "--hostname-override",
        NODE_NAME,
        "--output",
        "json",
        # A network namespace may not set nf_conntrack_max (EACCES): that refusal would make
        # each run exit 1. 0 leaves it, as kube-proxy's flag does.
        "--conntrack-max-per-core",
        "0",
    ]
    first = timed_process(command)
    resyncs: list[ProcessRun] = []
    saves: list[float] = []
    # In turns with ipvsadm -Sn reading the same table, so that the lab's noise (a boot's
    # pace drifts by a third) falls on both sides of the ratio alike.
    for _ in range(ONCE_RESYNCS):
        resyncs.append(timed_process(command))
        saves.append(timed_command(["ipvsadm", "-Sn"]))
    return {
        "once_first_sync_s": first.usage.wall_s,
        "once_first_sync_cpu_s": first.usage.cpu_s,
        **median_spread("once_resync_s", [run.usage.wall_s for run in resyncs]),
        **median_spread("once_resync_cpu_s", [run.usage.cpu_s for run in resyncs]),
        **median_spread("once_ipvsadm_save_s", saves),
        "once_resync_writes": max(json.loads(run.stdout)["writes"] for run in resyncs),
        "once_peak_rss_mb": max(run.usage.peak_rss_mb for run in [first, *resyncs]),
    }


def measure_reconciler(desired: DesiredState) -> dict[str, float]:
    with real_kernel() as kernel:
        reconciler = Reconciler(kernel)
        first, _ = wall_and_cpu(lambda: reconciler.sync(desired))
        result = None

        def resync() -> None:
            nonlocal result
            result = reconciler.sync(desired)

        resync_s, resync_cpu = wall_and_cpu(resync)
    assert result is not None
    return {
        "first_sync_s": first,
        "resync_s": resync_s,
        "resync_cpu_s": resync_cpu,
        "resync_writes": result.writes,
    }


def wall_and_cpu(action: Callable[[], object]) -> tuple[float, float]:
    start, cpu = time.perf_counter(), time.process_time()
    action()
    return time.perf_counter() - start, time.process_time() - cpu


def measure(manifest: Path, changes: int, once: bool, sync_period: str) -> dict[str, Any]:
    # Our own copy of the cluster, read with json: what is measured is the tools and ipvsproxy.
    snapshot, _ = snapshot_from_objects(json.loads(manifest.read_text())["items"], NODE_NAME)
    desired = translate(snapshot, Settings())
    figures: dict[str, Any] = {
        "virtual_servers": len(desired.virtual_servers),
        "real_servers": sum(len(v.real_servers) for v in desired.virtual_servers.values()),
        "bound_addresses": len(desired.bound_addresses),
    }
    steps: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("ipvsadm -R, ipvsadm -Sn, ip -batch", lambda: measure_tools(desired)),
        ("reconciler in process", lambda: measure_reconciler(desired)),
    ]
    if once:
        steps.insert(1, ("sync --once", lambda: measure_once(manifest)))
    if daemon_available():
        steps.append(("ipvsproxy run", lambda: measure_daemon(manifest, changes, sync_period)))
    failures = []
    for number, (name, step) in enumerate(steps):
        log(f"{manifest.name}: {name}")
        try:
            with fresh_namespace(f"bench-{manifest.stem}-{number}"):
                figures |= step()
        except (OSError, RuntimeError, subprocess.SubprocessError) as error:
            # One step that fails (the lab's 1 GB running out, say) leaves the others' figures.
            failures.append(f"{name}: {error}")
        log(f"{manifest.name}: {name}: done")
    figures["daemon"] = "measured" if daemon_available() else "not available"
    figures["daemon_sync_period"] = sync_period
    figures["failures"] = failures
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--changes", type=int, default=100, help="changes of each kind")
    parser.add_argument(
        "--skip-once",
        action="store_true",
        help="leave out sync --once (its manifest loader can exhaust the lab's memory maps)",
    )
    parser.add_argument(
        "--daemon-sync-period",
        default=NO_FULL_SYNC,
        help="the daemon's --ipvs-sync-period (30s: its periodic full syncs in the window)",
    )
    parser.add_argument("manifests", type=Path, nargs="+")
    args = parser.parse_args()
    results: dict[str, Any] = {"sizes": {}}
    for manifest in args.manifests:
        services = manifest.stem.rsplit("-", 1)[-1]
        results["sizes"][services] = measure(
            manifest, args.changes, not args.skip_once, args.daemon_sync_period
        )
        # Written after each size, so a boot that dies late keeps what it measured.
        args.out.write_text(json.dumps(results, indent=2))
    results["lab_loadavg"] = Path("/proc/loadavg").read_text().split()[:3]
    results["lab_max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
