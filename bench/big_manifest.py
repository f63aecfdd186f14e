"""The 10,000-service, 100,000-endpoint cluster of translate_bench as one JSON manifest.

As ``kubectl get services,endpointslices,nodes -A -o json`` prints it (indented):
``python bench/big_manifest.py /tmp/big.json``; ``bench/command_bench.py`` times the whole
``sync --once --dry-run`` on it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# Run as a script, so this folder is on the path.
from translate_bench import cluster_objects


def write_manifest(path: Path) -> None:
    objects = cluster_objects()
    for number, obj in enumerate(objects):
        obj["metadata"]["creationTimestamp"] = f"2026-01-01T00:{number // 60 % 60:02d}:00Z"
    with path.open("w") as out:
        json.dump({"apiVersion": "v1", "kind": "List", "items": objects}, out, indent=4)


if __name__ == "__main__":
    write_manifest(Path(sys.argv[1]))
