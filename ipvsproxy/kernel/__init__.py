"""The kernel layer: IPVS, addresses, ipsets, iptables, conntrack and sysctls.

pyroute2's package ``__init__`` imports every module it has (NDB, wireless, devlink, plan9
and more), which was about half of ``sync --once``'s start in the lab, where every file read
crosses hostfs. This layer uses a few submodules, so the package is registered bare before
any of them is imported: they load alone. The first name asked of the package itself
(``from pyroute2 import IPRoute``, as some tests write) runs its ``__init__`` then.
"""

from __future__ import annotations

import importlib.util
import sys


def _register_bare(package: str) -> None:
    if package in sys.modules:
        return
    spec = importlib.util.find_spec(package)
    if spec is None or spec.loader is None:
        return
    loader = spec.loader
    module = importlib.util.module_from_spec(spec)

    def complete(name: str) -> object:
        if importlib.util.find_spec(f"{package}.{name}") is not None:
            # A submodule (``from pyroute2 import config``): the import system loads it alone.
            raise AttributeError(name)
        del module.__dict__["__getattr__"]
        loader.exec_module(module)
        return getattr(module, name)

    module.__dict__["__getattr__"] = complete
    sys.modules[package] = module


_register_bare("pyroute2")
