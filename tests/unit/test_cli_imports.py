"""What the command line loads before it knows the command: only what every command needs.

A process start is the dearest part of ``sync --once`` (seconds inside the lab); the daemon's
libraries (the kubernetes client, prometheus_client) are for ``run`` and an API source alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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


# What only making the dummy link, flushing flows, a YAML file, ``show`` asking the daemon or
# ``run`` needs, and the modules of ``show``, ``cleanup`` and ``takeover``: loaded at first
# use. pyroute2's generic netlink package brings asyncio and ssl, hashlib OpenSSL (_hashlib):
# each tens to hundreds of ms of a start in the lab.
FIRST_USE = """
import importlib, sys
importlib.import_module("ipvsproxy.cli")
print(" ".join(sorted(set(sys.argv[1:]) & set(sys.modules))))
"""
LOADED_AT_FIRST_USE = (
    "pyroute2.iproute.linux",
    "pyroute2.conntrack",
    "pyroute2.netlink.generic",
    "asyncio",
    "ssl",
    "_hashlib",
    "yaml",
    "http.client",
    "ipvsproxy.daemon",
    "email",
    "ipvsproxy.show",
    "ipvsproxy.show_source",
    "ipvsproxy.owners",
    "ipvsproxy.reconcile.cleanup",
    "ipvsproxy.reconcile.takeover",
)


def test_the_command_line_loads_none_of_what_only_some_commands_use() -> None:
    done = subprocess.run(
        [sys.executable, "-c", FIRST_USE, *LOADED_AT_FIRST_USE],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == []


def test_the_kernel_layer_loads_pyroute2_s_submodules_it_uses_and_not_the_rest() -> None:
    lean, whole = _pyroute2_modules("ipvsproxy.kernel.bundle", "from pyroute2 import IPRoute")
    assert 0 < lean < whole
    # The package's own names still come, whole, at their first use.
    later, _ = _pyroute2_modules("pyroute2", "pass")
    assert later == whole


# The kubernetes client's package __init__ imports all of it (the API classes with their models,
# the dynamic client, watch, stream, ...); the daemon needs its configuration, loaders and pool.
KUBERNETES_MODULES = """
import importlib, json, sys
importlib.import_module("ipvsproxy.daemon.main")
from ipvsproxy.cluster.connection import connect
connect(kubeconfig=sys.argv[1]).close()
lean = sorted(name for name in sys.modules if name.split(".")[0] == "kubernetes")
from kubernetes import client
api = client.CoreV1Api
whole = sum(name.split(".")[0] == "kubernetes" for name in sys.modules)
print(json.dumps({"lean": lean, "whole": whole, "api": api.__name__}))
"""

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: a-token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def test_the_daemon_loads_the_kubernetes_client_s_modules_it_uses_and_not_the_rest(
    tmp_path: Path,
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    done = subprocess.run(
        [sys.executable, "-c", KUBERNETES_MODULES, str(kubeconfig)],
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = json.loads(done.stdout)
    lean = loaded["lean"]
    # Neither an API class nor a model: each API class imports tens of models.
    assert not [
        name
        for name in lean
        if name.startswith(("kubernetes.client.api.", "kubernetes.client.models."))
    ]
    assert {"kubernetes.client.configuration", "kubernetes.config.kube_config"} <= set(lean)
    assert len(lean) <= 25
    # The package's own names still come, whole, at their first use.
    assert loaded["api"] == "CoreV1Api"
    assert loaded["whole"] > 4 * len(lean)
