"""Wall time, CPU time and peak memory of the whole command on a 10,000-service manifest.

``sync --once --dry-run --source big.json`` as a user runs it, once with text and once with
JSON output. A report, not a test: on a shared machine the wall time follows the load.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from big_manifest import write_manifest
from child_usage import measured


def run(manifest: Path, output: str) -> str:
    usage = measured(
        [sys.executable, "-m", "ipvsproxy", "sync", "--once", "--dry-run", "--source",
         str(manifest), "--hostname-override", "node-0", "--output", output],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    if usage.exit_code != 0:
        raise SystemExit(f"sync --once --output {output} exited {usage.exit_code}")
    return (
        f"{usage.wall_s:.1f} s wall, {usage.cpu_s:.1f} s CPU, peak RSS {usage.peak_rss_mb:.0f} MB"
    )


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
