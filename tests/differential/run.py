"""One lab boot of the differential run: the control plane, then, under each profile of this
boot's share, both proxies on their mirrored nodes and the work: the named scenarios' phases
in lockstep, or the random steps. Every comparison's differences go to a JSON file for the
host (``__main__``), and to the console as they are found."""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.controlplane.build import located
from tests.controlplane.cluster import SERVICE_CIDR
from tests.differential import machine
from tests.differential.cluster import Cluster
from tests.differential.corpus import SCENARIOS
from tests.differential.pair import Pair, iptables_flavour
from tests.differential.plan import Work
from tests.differential.profiles import PROFILES
from tests.differential.results import Found, Results, found_in
from tests.differential.scenario import Scenario, Writer
from tests.differential.topology import NODE_A, NODE_B, NODE_C, set_up_fabric
from tests.lab.controlplane import LabControlPlane, lab_binaries

# A tmpfs inside the lab: kube-proxy runs from a copy there (a binary read across hostfs is
# slow to start).
WORK = Path("/run/differential")
SERVICE_CIDRS = f"{SERVICE_CIDR},fd00:10:96::/108"
# Scenarios written at once: the API server answers concurrent requests sooner, even on one CPU.
WRITERS = 6


def log(message: str) -> None:
    print(f"differential: {message}", flush=True)


def _record(results: Results, found: list[Found]) -> None:
    results.found += found
    for one in found:
        print(one, flush=True)


def run_scenarios(
    pair: Pair, cluster: Cluster, scenarios: Iterable[Scenario], results: Results
) -> None:
    """The profile's rounds: each writes one phase of every one of ``scenarios``, then both
    proxies sync, the kernels are compared and the phase's traffic verdicts taken."""
    chosen = list(scenarios)
    writer = Writer(cluster)
    for index, name in enumerate(pair.profile.rounds, 1):
        started = time.monotonic()
        phases = [(s, p) for s in chosen if (p := s.phase(name)) is not None]
        with ThreadPoolExecutor(WRITERS) as pool:
            list(pool.map(lambda sp: writer.write(sp[1].objects, sp[0].namespace), phases))
        written = time.monotonic()
        took = pair.wait(cluster)
        synced = time.monotonic()
        found = pair.differences()
        probes = [p for scenario, _ in phases for p in scenario.traffic if name in p.after]
        found += pair.traffic(cluster, probes)
        results.compares += 1
        results.probes += len(probes)
        log(
            f"{pair.profile.name} round {index} ({name}): {len(phases)} scenarios written in "
            f"{written - started:.1f} s, synced ({took}), compared in "
            f"{time.monotonic() - synced:.1f} s, {len(found)} differences, "
            f"{len(probes)} traffic verdicts"
        )
        moment = f"round {index} ({name})"
        _record(results, [found_in(pair.profile, moment, d, cluster) for d in found])
    results.scenarios += [s.name for s in chosen if s.name not in results.scenarios]


def random_steps(
    pair: Pair, cluster: Cluster, results: Results, *, steps: int, budget: float
) -> None:
    """The random steps under ``pair``'s profile (see ``machine``)."""
    progress = machine.Progress()

    def compare(moment: str) -> list[tuple[str, str | None]]:
        started = time.monotonic()
        took = pair.wait(cluster)
        synced = time.monotonic()
        found = [found_in(pair.profile, moment, d, cluster) for d in pair.differences()]
        results.compares += 1
        log(
            f"{moment}: {progress.steps} steps so far, synced ({took}), compared in "
            f"{time.monotonic() - synced:.1f} s ({synced - started:.1f} s waiting), "
            f"{len(found)} differences"
        )
        _record(results, found)
        return [(str(one), one.explained) for one in found]

    started = time.monotonic()
    try:
        machine.run(cluster, compare, steps, budget, progress)
    finally:
        results.steps += progress.steps
        log(
            f"random steps: {progress.steps} in {progress.batches} batches "
            f"({progress.refused} refused by the API server) in "
            f"{time.monotonic() - started:.0f} s"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.differential.run")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--logs", type=Path, required=True)
    parser.add_argument(
        "--work", action="append", type=Work.parse, default=[], help="PROFILE:I/N:STEPS"
    )
    parser.add_argument("--shrink-budget", type=float, default=900.0)
    args = parser.parse_args(argv)
    source = located()
    if source is None:
        raise SystemExit("the control plane is not built: python3 -m tests.controlplane.build")
    # Started first: it takes longest, and comes up while the rest of the boot is set up.
    lab_control_plane = LabControlPlane(
        apiserver_args=(f"--service-cluster-ip-range={SERVICE_CIDRS}",)
    ).start()
    started = time.monotonic()
    results = Results()
    binaries = lab_binaries(source, WORK / "bin", ("kube-proxy",))
    set_up_fabric()
    flavour = iptables_flavour()
    log(f"iptables flavour {flavour}")
    control_plane = lab_control_plane.ready()
    log(f"control plane up in {time.monotonic() - started:.0f} s")
    cluster = Cluster(control_plane)
    try:
        for node in (NODE_A, NODE_B, NODE_C):
            cluster.apply(node.node_object())
        for work in args.work:
            profile = PROFILES[work.profile]
            logs = args.logs / f"{work.profile}-{work.part[0]}"
            pair = Pair(profile, binaries, control_plane.kubeconfig, flavour, logs)
            started = time.monotonic()
            pair.start()
            try:
                took = pair.wait_started(cluster)
                log(f"{work}: both proxies synced in {time.monotonic() - started:.0f} s: {took}")
                start = [found_in(profile, "start", d, cluster) for d in pair.differences()]
                _record(results, start)
                index, count = work.part
                chosen = [s for s in SCENARIOS if work.profile in s.profiles][index::count]
                run_scenarios(pair, cluster, chosen, results)
                if work.steps:
                    random_steps(
                        pair, cluster, results, steps=work.steps, budget=args.shrink_budget
                    )
            except Exception as error:  # the host reports what went wrong, and goes on
                results.errors.append(f"{work}: {type(error).__name__}: {error}")
                log(results.errors[-1])
            finally:
                pair.stop()
    finally:
        lab_control_plane.stop()
        args.out.write_text(json.dumps(results.to_json(), indent=1))
        busy, total = cpu_seconds()
        log(f"this boot's CPU was busy {busy:.0f} s of {total:.0f} s (what one free core needs)")
    return 0


def cpu_seconds() -> tuple[float, float]:
    """The lab kernel's CPU time since boot, busy and in all, from /proc/stat: on a loaded
    machine the wall clock says little, the busy time what a core of its own would take."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    ticks = os.sysconf("SC_CLK_TCK")
    return (sum(fields) - idle) / ticks, sum(fields) / ticks


if __name__ == "__main__":
    raise SystemExit(main())
