"""What the command line loads before it knows the command: only what every command needs.

A process start is the dearest part of ``sync --once`` (seconds inside the lab); the daemon's
libraries (the kubernetes client, prometheus_client) are for ``run`` and an API source alone.
"""

from __future__ import annotations

import subprocess
import sys

DAEMON_LIBRARIES = ("kubernetes", "prometheus_client", "urllib3")

# A fresh interpreter: this test process has long imported all of them through other tests.
LOADED = """
import importlib, sys
importlib.import_module(sys.argv[1])
print(" ".join(sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[2:]))))
"""


def _daemon_libraries_loaded_by(module: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", LOADED, module, *DAEMON_LIBRARIES],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def test_the_command_line_loads_none_of_the_daemons_libraries() -> None:
    assert _daemon_libraries_loaded_by("ipvsproxy.cli") == ""


def test_the_check_sees_them_where_the_daemon_is_imported() -> None:
    assert _daemon_libraries_loaded_by("ipvsproxy.daemon.main") == " ".join(DAEMON_LIBRARIES)


# pyroute2's package __init__ imports every module it has; the kernel layer needs a few.
PYROUTE2_MODULES = """
import importlib, sys
importlib.import_module(sys.argv[1])
print(sum(name.startswith("pyroute2.") for name in sys.modules))
exec(sys.argv[2])
print(sum(name.startswith("pyroute2.") for name in sys.modules))
"""


def _pyroute2_modules(module: str, then: str) -> list[int]:
    done = subprocess.run(
        [sys.executable, "-c", PYROUTE2_MODULES, module, then],
        capture_output=True,
        text=True,
        check=True,
    )
    return [int(line) for line in done.stdout.split()]


def test_the_kernel_layer_loads_pyroute2_s_submodules_it_uses_and_not_the_rest() -> None:
    lean, whole = _pyroute2_modules("ipvsproxy.kernel.bundle", "from pyroute2 import IPRoute")
    assert 0 < lean < whole
    # The package's own names still come, whole, at their first use.
    later, _ = _pyroute2_modules("pyroute2", "pass")
    assert later == whole
