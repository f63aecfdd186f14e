"""The parts of the kubernetes client the proxy uses, loaded without the rest of it.

The package's ``__init__`` imports its configuration loaders, dynamic client, watch, stream,
utilities and leader election, and the generated API classes import their models (in
release 37, pydantic models: CoreV1Api alone loaded 254 modules and 21 MB). The proxy sends
its few requests itself (``connection.py``) and needs of the client only what knows a
cluster's credentials: the Configuration, the loaders that fill it in, and the REST client's
connection pool, which applies the configuration's TLS and proxy settings as the client does.
So the packages are registered bare and those submodules load alone; the kubeconfig loader,
which brings requests, oauthlib and the ApiClient (pydantic), only when a kubeconfig is read.
"""

from __future__ import annotations

from collections.abc import Callable

from ipvsproxy.lean_import import register_bare

# Parents first: finding a subpackage imports its parent, which would run that one's __init__.
for _package in ("kubernetes", "kubernetes.config", "kubernetes.utils"):
    register_bare(_package)
# What the loaders ask of the client package: each from its own module.
register_bare(
    "kubernetes.client",
    {
        "Configuration": "kubernetes.client.configuration",
        "ApiClient": "kubernetes.client.api_client",
    },
)
# Release 29's ApiClient imports it, and with it every model.
register_bare("kubernetes.client.models")

from kubernetes.client.configuration import Configuration  # noqa: E402
from kubernetes.client.rest import RESTClientObject  # noqa: E402
from kubernetes.config import incluster_config  # noqa: E402
from kubernetes.config.config_exception import ConfigException  # noqa: E402

__all__ = [
    "ConfigException",
    "Configuration",
    "RESTClientObject",
    "load_incluster_config",
    "load_kube_config",
]


def load_incluster_config(configuration: Configuration) -> None:
    """The pod's service account and the API server's address from its environment."""
    load: Callable[..., None] = incluster_config.load_incluster_config
    load(client_configuration=configuration)


def load_kube_config(path: str, configuration: Configuration) -> None:
    """The kubeconfig at ``path`` (its current context); its loader imported at first use."""
    from kubernetes.config import kube_config  # noqa: PLC0415

    load: Callable[..., None] = kube_config.load_kube_config
    load(config_file=path, client_configuration=configuration, persist_config=False)
