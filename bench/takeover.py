"""The takeover from kube-proxy and the hand-back at a size of one's choosing, as a figure.

The e2e scenario (``tests/lab/takeover.py``) with its numbers printed as JSON instead of
asserted: the IPVS writes at the takeover, the switch window each way, the requests and what
became of them. Run it inside a lab boot with memory for the cluster, from the repository root:

``IPVSPROXY_LAB_MEM=6G python -m tests.lab --run env PYTHONPATH=. python -m bench.takeover
--services 10000 --out bench-results/takeover.json`` (the control plane built first: ``nox -s
controlplane``).

Creating the Services through the API server inside the lab is its slowest part (about 25
objects a second on a quiet host); the output says how long it took.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tests.controlplane.build import located
from tests.lab.controlplane import LabControlPlane, lab_binaries
from tests.lab.netns import Node
from tests.lab.takeover import Outcome, Switch, run_takeover

KUBE_PROXY_FOLDER = Path("/run/ipvsproxy-kube-proxy")
# The scenario's logs and files, on the lab's tmpfs (gone with the boot).
SCENARIO_FOLDER = Path("/run/ipvsproxy-takeover")


def _switch(switch: Switch) -> dict[str, object]:
    report = switch.report
    return {
        "requests": report.requests,
        "failed": len(report.failed),
        "retransmitted": len(report.retransmitted),
        "slower_than_1s": report.slow,
        "slowest_seconds": round(report.slowest, 3),
        "long_lived_kept": report.long_lived_kept,
        "long_lived_lost": report.long_lived_lost,
        "ipvs_writes": list(switch.ipvs_writes),
        "switch_seconds": round(switch.seconds, 1),
        "short_requests_per_second": round(switch.rate, 1),
        "line": switch.line(),
    }


def summary(outcome: Outcome) -> dict[str, object]:
    return {
        "services": outcome.services,
        "seconds_to_create": round(outcome.seconds_to_create, 1),
        "kube_proxy_first_sync_seconds": round(outcome.kube_proxy_first_sync, 1),
        "check_status": outcome.check_status,
        "check_verdict": outcome.check_output,
        "predicted_ipvs_writes": len(outcome.predicted),
        "takeover": _switch(outcome.takeover),
        "handback": _switch(outcome.handback),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.takeover")
    parser.add_argument("--services", type=int, default=10000)
    parser.add_argument("--rate", type=float, default=250.0, help="short requests a second")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args(argv)
    built = located()
    if built is None:
        print("bench.takeover: build the control plane first: python -m tests.controlplane.build")
        return 2
    node = Node()
    node.set_up()
    lab = LabControlPlane().start()
    try:
        binaries = lab_binaries(built, KUBE_PROXY_FOLDER, ("kube-proxy",))
        outcome = run_takeover(
            lab.ready(), binaries, node, SCENARIO_FOLDER, services=args.services, rate=args.rate
        )
    finally:
        lab.stop()
        node.tear_down()
    text = json.dumps(summary(outcome), indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
