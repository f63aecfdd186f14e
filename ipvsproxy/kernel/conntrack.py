"""Connection tracking flows of services: the kernel's through ctnetlink, and a fake.

When a UDP endpoint goes away, flows NATed to it stay in conntrack and keep sending the
client's packets to a pod that is gone (kube-proxy issues #71514, #77802) until they time out;
the proxy deletes them, as kube-proxy does.
"""

from __future__ import annotations

from dataclasses import dataclass

from ipvsproxy.model import IPAddress, Protocol, RealServerKey, VirtualServerKey


@dataclass(frozen=True, slots=True)
class Flow:
    """One tracked flow: a client's packets to a service, NATed to one endpoint."""

    service: VirtualServerKey  # the original destination, with the flow's protocol
    endpoint: RealServerKey  # the source of the replies
    client: IPAddress
    client_port: int

    def matches(
        self, protocol: Protocol, service: VirtualServerKey, endpoint: RealServerKey
    ) -> bool:
        """Whether this is a ``protocol`` flow to service's address and port, NATed to endpoint."""
        return (
            self.service.protocol is protocol
            and (self.service.address, self.service.port) == (service.address, service.port)
            and self.endpoint == endpoint
        )


class FakeConntrack:
    """An in-memory conntrack table; tests seed it with ``add_flow``."""

    def __init__(self) -> None:
        self._flows: set[Flow] = set()

    def add_flow(self, flow: Flow) -> None:
        self._flows.add(flow)

    def flows(self) -> frozenset[Flow]:
        return frozenset(self._flows)

    def delete_entries(
        self, protocol: Protocol, service: VirtualServerKey, endpoint: RealServerKey
    ) -> int:
        doomed = {flow for flow in self._flows if flow.matches(protocol, service, endpoint)}
        self._flows -= doomed
        return len(doomed)
