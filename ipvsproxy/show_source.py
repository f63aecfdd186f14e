"""Where ``show`` finds Service names when it is given none: the proxy running on this node.

``kubectl exec ds/ipvsproxy -- ipvsproxy show`` runs beside the daemon, which already holds a
translation: asking it on its metrics address costs the daemon one JSON answer, where listing
and translating the whole cluster again would cost a second process the daemon's memory.
"""

from __future__ import annotations

import os

from ipvsproxy.config import parse_bind_address
from ipvsproxy.defaults import UNSPECIFIED_HOSTS
from ipvsproxy.model import ObjectKey
from ipvsproxy.owners import MAX_BODY, PATH, OwnersAnswer, parse_owners

ASK_TIMEOUT = 10.0


def in_cluster() -> bool:
    """Whether this runs in a pod, where the in-cluster service account reaches the API."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def ask_daemon(
    metrics_bind_address: str, service: ObjectKey | None, timeout: float = ASK_TIMEOUT
) -> OwnersAnswer | str:
    """The running proxy's owners (``service``'s only, if given), or why there are none."""
    try:
        host, port = parse_bind_address(metrics_bind_address)
    except ValueError as error:
        return f"metrics address {metrics_bind_address!r}: {error}"
    if not port:
        return "the proxy's metrics are off (port 0), and with them its translation"
    if host in UNSPECIFIED_HOSTS:
        host = "::1" if host == "::" else "127.0.0.1"
    path = PATH if service is None else f"{PATH}/{service.namespace}/{service.name}"
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    # Imported here: http.client brings email and ssl, a tenth of every command's start in the
    # lab, for ``show`` alone.
    import http.client  # noqa: PLC0415

    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        body = response.read(MAX_BODY + 1)
        if response.status != 200:
            return f"no proxy answers on {where} ({response.status} for {path})"
        return parse_owners(body)
    except OSError as error:
        return f"no proxy answers on {where} ({error.strerror or error})"
    except (ValueError, http.client.HTTPException) as error:
        return f"the proxy on {where} sent no usable answer: {error}"
    finally:
        connection.close()
