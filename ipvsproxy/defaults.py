"""The proxy's defaults, kube-proxy's where it has one, each in one place.

The configuration file's defaulting, the flags' help, ``ProxyConfig``, ``DaemonOptions`` and
translate's ``Settings`` all read them here.
"""

from __future__ import annotations

SCHEDULER = "rr"
# --iptables-masquerade-bit: the packet-mark bit that asks for SNAT.
MASQUERADE_BIT = 14
SYNC_PERIOD_SECONDS = 30.0
# kube-proxy's IPVS default is 0s; one second lets a burst of changes coalesce.
MIN_SYNC_PERIOD_SECONDS = 1.0
HEALTHZ_BIND = ("0.0.0.0", 10256)
METRICS_BIND = ("127.0.0.1", 10249)
LOGGING_FORMAT = "text"
# Bind hosts that mean every address: Go's net.Listen("tcp", ...) on one, as kube-proxy
# serves, listens on both families.
UNSPECIFIED_HOSTS = frozenset({"", "0.0.0.0", "::"})


def bind_text(address: tuple[str, int]) -> str:
    """``HOST:PORT``, as the bind-address flags and fields take it."""
    host, port = address
    return f"{host}:{port}"


def duration_text(seconds: float) -> str:
    """Whole or fractional seconds as a Go duration (``30s``, ``1.5s``)."""
    return f"{seconds:g}s"
