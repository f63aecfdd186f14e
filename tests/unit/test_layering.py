"""The pure planner depends on the kernel's interfaces only, never on the netlink library."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import ipvsproxy.reconcile

RECONCILE_MODULES = sorted(
    f"ipvsproxy.reconcile.{module.name}"
    for module in pkgutil.iter_modules(ipvsproxy.reconcile.__path__)
)

# Run in a fresh interpreter: this test process has long imported pyroute2 through other tests.
# The kernel package registers pyroute2's package bare (its __init__ not run, see
# ipvsproxy.kernel): that one counts as loaded only once its __init__ has run.
LOADED_PYROUTE2 = """
import importlib, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
package = sys.modules.get("pyroute2")
ran = package is not None and "__version__" in vars(package)
print(" ".join(sorted(
    m for m in sys.modules if m.startswith("pyroute2.") or (m == "pyroute2" and ran)
)))
"""


def _pyroute2_loaded_by(modules: list[str]) -> str:
    done = subprocess.run(
        [sys.executable, "-c", LOADED_PYROUTE2, *modules],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def test_importing_every_reconcile_module_does_not_import_pyroute2() -> None:
    assert "ipvsproxy.reconcile.cleanup" in RECONCILE_MODULES
    assert _pyroute2_loaded_by(RECONCILE_MODULES) == ""


def test_the_check_sees_pyroute2_where_a_kernel_implementation_is_imported() -> None:
    assert (
        "pyroute2.netlink.nfnetlink.ipset"
        in _pyroute2_loaded_by(["ipvsproxy.kernel.bundle"]).split()
    )
