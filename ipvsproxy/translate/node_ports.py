"""The node-port space: nodePorts and healthCheckNodePorts, which share every node's ports.

The API server's allocator hands each number out once, but a ``--source`` file or a broken
allocator does not, so the proxy settles the space itself: a port outside
``--service-node-port-range`` or on one the node serves itself is refused, and two services
on one number are settled as two claims on one virtual server are (``conflicts``): the older
keeps it, the other is named. A health check is served over TCP, so it shares its number with
TCP nodePorts only.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ipvsproxy.frozen_init import quick_init
from ipvsproxy.model import TransportProtocol
from ipvsproxy.translate.settings import Settings


class PortUse(enum.StrEnum):
    """What a service wants a node port for, by the field that asks for it."""

    NODE_PORT = "nodePort"
    HEALTH_CHECK = "healthCheckNodePort"


@quick_init
@dataclass(frozen=True, slots=True)
class NodePortKey:
    """One port of the node, on every address NodePorts use."""

    protocol: TransportProtocol
    port: int

    def __str__(self) -> str:
        return f"node port {self.protocol} {self.port}"


def refused_node_port(port: int, use: PortUse, settings: Settings) -> str | None:
    """Why ``port`` may not serve as a node port, or None when it may."""
    if port in settings.own_ports:
        return f"{use} {port} is a port this node serves itself (kubelet, health or metrics)"
    low, high = settings.node_port_range
    if not low <= port <= high:
        return f"{use} {port} is outside --service-node-port-range {low}-{high}"
    return None
