"""Connection tracking flows of services: the kernel's through ctnetlink, and a fake.

When a UDP endpoint goes away, flows NATed to it stay in conntrack and keep sending the
client's packets to a pod that is gone (kube-proxy issues #71514, #77802) until they time out;
the proxy deletes them, as kube-proxy does.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from dataclasses import dataclass
from typing import Any

from pyroute2.conntrack import Conntrack, NFCTAttrTuple
from pyroute2.netlink.exceptions import NetlinkError

from ipvsproxy.kernel.netlink import refusals_as_os_errors
from ipvsproxy.model import (
    IP_PROTOCOL_NUMBERS,
    PROTOCOLS_BY_NUMBER,
    IPAddress,
    RealServerKey,
    TransportProtocol,
    VirtualServerKey,
)


@dataclass(frozen=True, slots=True)
class Flow:
    """One tracked flow: a client's packets to a service, NATed to one endpoint."""

    service: VirtualServerKey  # the original destination, with the flow's protocol
    endpoint: RealServerKey  # the source of the replies
    client: IPAddress
    client_port: int

    def matches(
        self, protocol: TransportProtocol, service: VirtualServerKey, endpoint: RealServerKey
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
        self, protocol: TransportProtocol, service: VirtualServerKey, endpoint: RealServerKey
    ) -> int:
        doomed = {flow for flow in self._flows if flow.matches(protocol, service, endpoint)}
        self._flows -= doomed
        return len(doomed)


def _family(address: IPAddress) -> int:
    return socket.AF_INET if address.version == 4 else socket.AF_INET6


def _address(ip: Any, direction: str) -> IPAddress:
    value = ip.get_attr(f"CTA_IP_V4_{direction}") or ip.get_attr(f"CTA_IP_V6_{direction}")
    return ipaddress.ip_address(value)


def decode_flow(message: Any) -> Flow | None:
    """The Flow a dumped conntrack message is; None for one without ports (ICMP, ...).

    Decoded here rather than by pyroute2's ConntrackEntry, which reads no SCTP ports.
    """
    original, reply = message.get_attr("CTA_TUPLE_ORIG"), message.get_attr("CTA_TUPLE_REPLY")
    original_ports = original.get_attr("CTA_TUPLE_PROTO")
    reply_ports = reply.get_attr("CTA_TUPLE_PROTO")
    protocol = PROTOCOLS_BY_NUMBER.get(original_ports.get_attr("CTA_PROTO_NUM"))
    if protocol is None:
        return None
    original_ip, reply_ip = original.get_attr("CTA_TUPLE_IP"), reply.get_attr("CTA_TUPLE_IP")
    return Flow(
        service=VirtualServerKey(
            protocol, _address(original_ip, "DST"), original_ports.get_attr("CTA_PROTO_DST_PORT")
        ),
        endpoint=RealServerKey(
            _address(reply_ip, "SRC"), reply_ports.get_attr("CTA_PROTO_SRC_PORT")
        ),
        client=_address(original_ip, "SRC"),
        client_port=original_ports.get_attr("CTA_PROTO_SRC_PORT"),
    )


def original_tuple(flow: Flow) -> NFCTAttrTuple:
    """The tuple of the flow's first packet, by which the kernel knows the flow."""
    return NFCTAttrTuple(
        family=_family(flow.client),
        saddr=str(flow.client),
        daddr=str(flow.service.address),
        proto=IP_PROTOCOL_NUMBERS[flow.service.protocol],
        sport=flow.client_port,
        dport=flow.service.port,
    )


class NetlinkConntrack:
    """The kernel's conntrack table through ctnetlink (nf_conntrack_netlink).

    The kernel cannot delete by a partial tuple, so this dumps the flows to the service's
    port and deletes each one to its address whose replies come from the endpoint, as
    kube-proxy does.
    """

    def __init__(self) -> None:
        self._tables = {
            4: Conntrack(nfgen_family=socket.AF_INET),
            6: Conntrack(nfgen_family=socket.AF_INET6),
        }

    def close(self) -> None:
        for table in self._tables.values():
            table.close()

    def __enter__(self) -> NetlinkConntrack:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def delete_entries(
        self, protocol: TransportProtocol, service: VirtualServerKey, endpoint: RealServerKey
    ) -> int:
        with refusals_as_os_errors():
            table = self._tables[service.address.version]
            # The kernel filters by protocol and port; by address too, but in the lab's 6.1 kernel
            # an IPv6 address filter matched nothing, so the address is compared here.
            to_service = NFCTAttrTuple(
                family=_family(service.address),
                proto=IP_PROTOCOL_NUMBERS[protocol],
                dport=service.port,
            )
            doomed = [
                flow
                for message in table.dump(tuple_orig=to_service)
                if (flow := decode_flow(message)) is not None
                and flow.matches(protocol, service, endpoint)
            ]
            deleted = 0
            for flow in doomed:
                try:
                    table.entry("del", tuple_orig=original_tuple(flow))
                except NetlinkError as error:
                    # The flow may have expired between the dump and the delete.
                    if error.code != errno.ENOENT:
                        raise
                    continue
                deleted += 1
            return deleted
