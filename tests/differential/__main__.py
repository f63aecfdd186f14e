"""``python -m tests.differential``: ipvsproxy against the real kube-proxy, in the lab.

Boots one lab kernel per CPU (``IPVSPROXY_LAB_BOOTS``); each runs its share of the work
(``run.py``): the named scenarios under some profiles, or the random steps. Their findings
merge here; every difference is printed with its explanation, or as UNEXPLAINED, and the
last line says ``differential: N scenarios, M steps, K differences, K explained``. The exit
status is 0 only when every difference is explained and nothing went wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.differential.plan import shares
from tests.differential.profiles import PROFILES
from tests.differential.report import Summary, merge, render
from tests.lab.boot import boot_count, run_in_lab, unavailable_reason

STEPS_VARIABLE = "IPVSPROXY_DIFFERENTIAL_STEPS"
DEFAULT_STEPS = 200
# Each boot holds etcd, the API server, both proxies and their namespaces.
LAB_MEMORY = "3G"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.differential")
    parser.add_argument(
        "--steps",
        type=int,
        default=int(os.environ.get(STEPS_VARIABLE) or DEFAULT_STEPS),
        help=f"random steps (default {DEFAULT_STEPS}, or ${STEPS_VARIABLE})",
    )
    parser.add_argument("--logs", type=Path, default=Path("build/differential"))
    args = parser.parse_args(argv)
    reason = unavailable_reason()
    if reason is not None:
        print(f"differential: the lab is unavailable: {reason}", flush=True)
        return 1 if os.environ.get("CI") == "true" else 0
    args.logs.mkdir(parents=True, exist_ok=True)
    work = shares(boot_count(), args.steps, list(PROFILES))
    with tempfile.TemporaryDirectory(prefix="ipvsproxy-differential-") as folder:
        outs = [Path(folder) / f"boot{index}.json" for index in range(len(work))]

        def boot(index: int) -> int:
            command = [
                sys.executable, "-m", "tests.differential.run",
                "--out", str(outs[index]), "--logs", str(args.logs.resolve() / f"boot{index}"),
                *(f"--work={item}" for item in work[index]),
            ]  # fmt: skip
            env = {"IPVSPROXY_LAB_MEM": os.environ.get("IPVSPROXY_LAB_MEM") or LAB_MEMORY}
            if index == 0:
                return run_in_lab(command, lab_env=env)
            with (args.logs / f"boot{index}.console").open("wb") as console:
                return run_in_lab(command, console, env)

        os.environ.setdefault("IPVSPROXY_LAB_MEM", LAB_MEMORY)
        with ThreadPoolExecutor(len(work)) as pool:
            statuses = list(pool.map(boot, range(len(work))))
        found = [json.loads(out.read_text()) if out.exists() else None for out in outs]
    for index in range(1, len(work)):
        console = args.logs / f"boot{index}.console"
        print(f"differential: boot {index + 1} of {len(work)} ({console}):", flush=True)
        sys.stdout.write(console.read_text(errors="replace"))
    summary: Summary = merge(found, statuses)
    print(render(summary), flush=True)
    return 0 if summary.passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
