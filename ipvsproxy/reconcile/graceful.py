"""Graceful termination: what to do with a real server that is no longer desired.

As kube-proxy's graceful-termination manager: TCP real servers with connections are set to
weight 0 and deleted once ActiveConn + InActConn reach zero; UDP and SCTP ones (no connection
state worth waiting for) are deleted at once and their conntrack entries flushed. Unlike
kube-proxy, the wait is bounded, so a connection held open forever cannot pin a dead pod.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ipvsproxy.model import (
    DeleteRealServer,
    FlushConntrack,
    IPVSOp,
    RealServerRef,
    RealServerState,
    TransportProtocol,
    UpdateRealServer,
)

# IPVS's own timeout for an idle established TCP connection (ipvsadm --set default): a drain
# that outlives it is held only by connections the kernel would itself have expired.
DEFAULT_GRACE_PERIOD = 900.0
DRAINED_PROTOCOLS = frozenset({TransportProtocol.TCP})


@dataclass(frozen=True, slots=True)
class Drain:
    """A real server at weight 0, waiting for its connections to end."""

    ref: RealServerRef
    started: float
    active_connections: int = 0
    inactive_connections: int = 0


@dataclass(frozen=True, slots=True)
class Removal:
    """The ops for one unwanted real server, and its drain if it is (still) draining."""

    ops: tuple[IPVSOp, ...] = ()
    flushes: tuple[FlushConntrack, ...] = ()
    drain: Drain | None = None


def remove_real_server(
    ref: RealServerRef,
    state: RealServerState,
    started: float | None,
    now: float,
    grace_period: float,
) -> Removal:
    """Delete, drain, or keep waiting; ``started`` is when this drain began, if we know."""
    delete = DeleteRealServer(ref.virtual, ref.real)
    if ref.virtual.protocol not in DRAINED_PROTOCOLS:
        return Removal((delete,), (FlushConntrack(ref.virtual, ref.real),))
    connections = state.active_connections + state.inactive_connections
    began = now if started is None else started
    if connections == 0 or now - began >= grace_period:
        return Removal((delete,))
    drain = Drain(ref, began, state.active_connections, state.inactive_connections)
    if state.server.weight == 0:
        return Removal(drain=drain)
    return Removal((UpdateRealServer(ref.virtual, replace(state.server, weight=0)),), drain=drain)
