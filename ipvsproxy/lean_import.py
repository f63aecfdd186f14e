"""Load the few submodules of a big package that we use, without its ``__init__``.

Some packages' ``__init__`` imports everything they have: pyroute2's every module (NDB,
wireless, devlink, plan9 and more), the kubernetes client's every API class with its models,
its dynamic client, watch, stream and utilities. ``register_bare`` puts a package in
``sys.modules`` with its ``__init__`` not run, so that its submodules load alone. A name asked
of the package itself that is neither a submodule nor one of ``names`` runs the ``__init__``
then, so code that wants the whole package still gets it.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Mapping


def register_bare(package: str, names: Mapping[str, str] | None = None) -> None:
    """Register ``package`` bare, unless it is imported already.

    ``names`` maps names the package exports to the submodule that defines each (``{"Configuration":
    "kubernetes.client.configuration"}``): those load their submodule alone, for the
    submodules of other packages that ask the package for them.
    """
    if package in sys.modules:
        return
    spec = importlib.util.find_spec(package)
    if spec is None or spec.loader is None:
        return
    loader = spec.loader
    module = importlib.util.module_from_spec(spec)
    defined_in = dict(names or {})

    def complete(name: str) -> object:
        if name in defined_in:
            value = getattr(importlib.import_module(defined_in[name]), name)
            setattr(module, name, value)
            return value
        if importlib.util.find_spec(f"{package}.{name}") is not None:
            # A submodule (``from pyroute2 import config``): the import system loads it alone.
            raise AttributeError(name)
        del module.__dict__["__getattr__"]
        loader.exec_module(module)
        return getattr(module, name)

    module.__dict__["__getattr__"] = complete
    sys.modules[package] = module
    parent, _, child = package.rpartition(".")
    if parent in sys.modules:
        setattr(sys.modules[parent], child, module)
