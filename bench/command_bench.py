"""Wall time, CPU time and peak memory of the whole command on a 10,000-service manifest.

``sync --once --dry-run --source big.json`` as a user runs it, once with text and once with
JSON output. A report, not a test: on a shared machine the wall time follows the load.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from big_manifest import write_manifest


def run(manifest: Path, output: str) -> str:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "ipvsproxy", "sync", "--once", "--dry-run", "--source",
         str(manifest), "--hostname-override", "node-0", "--output", output],
        stdout=subprocess.DEVNULL, check=True,
    )  # fmt: skip
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    # ru_maxrss of children is the largest child so far: run the lighter output first.
    return f"{wall:.1f} s wall, {cpu:.1f} s CPU, peak RSS {after.ru_maxrss // 1024} MB"


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        manifest = Path(folder) / "big.json"
        write_manifest(manifest)
        size = manifest.stat().st_size / 1e6
        print(f"sync --once --dry-run on {size:.0f} MB of JSON (10,000 services x 10 endpoints),")
        print(f"load average {os.getloadavg()[0]:.1f}:")
        for output in ("text", "json"):
            print(f"  --output {output}: {run(manifest, output)}")


if __name__ == "__main__":
    main()
