"""A command's own wall time, CPU time and peak RSS, measured from a small process of its own.

A child's ``ru_maxrss`` is not only its own: across exec Linux keeps the larger of the old
image's high-water mark and the new one's, and ``subprocess`` starts a child with vfork, in its
parent's memory. So a command started by a bench that holds a parsed cluster reported the
bench's peak (364 MB at 10,000 services, the bench's own ``ru_maxrss`` to the kilobyte). Forked
from this small interpreter instead, the command's peak is its own, with this process's size
(about 10 MB) as a floor.

``python bench/child_usage.py OUT COMMAND...`` runs COMMAND on this process's standard streams
and writes to OUT one JSON object: ``wall_s``, ``cpu_s``, ``peak_rss_mb`` and ``exit_code``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO


@dataclass(frozen=True)
class ChildUsage:
    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    exit_code: int


def measured(
    command: list[str], stdout: IO[str] | int | None = None, stderr: IO[str] | None = None
) -> ChildUsage:
    """Run ``command`` through this module and return what it used."""
    with tempfile.NamedTemporaryFile("r", suffix=".json") as result:
        subprocess.run(
            [sys.executable, __file__, result.name, *command],
            stdout=stdout,
            stderr=stderr,
            check=True,
        )
        return ChildUsage(**json.loads(Path(result.name).read_text()))


def main() -> None:
    out, command = Path(sys.argv[1]), sys.argv[2:]
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(command[0], command)
        finally:
            os._exit(127)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - start
    out.write_text(
        json.dumps(
            {
                "wall_s": wall,
                "cpu_s": usage.ru_utime + usage.ru_stime,
                "peak_rss_mb": usage.ru_maxrss / 1024,
                "exit_code": os.waitstatus_to_exitcode(status),
            }
        )
    )


if __name__ == "__main__":
    main()
