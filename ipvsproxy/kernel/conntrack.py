"""Connection tracking flows of services: the kernel's through ctnetlink (fake: ``kernel.testing``).

When a UDP endpoint goes away, flows NATed to it stay in conntrack and keep sending the
client's packets to a pod that is gone (kube-proxy issues #71514, #77802) until they time out;
the proxy deletes them, as kube-proxy does.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ipvsproxy.kernel.netlink import (
    BATCH_SIZE,
    NETLINK_NETFILTER,
    NLA_F_NESTED,
    BatchSocket,
    Request,
    attribute,
    refusals_as_os_errors,
)
from ipvsproxy.model import (
    IP_PROTOCOL_NUMBERS,
    PROTOCOLS_BY_NUMBER,
    IPAddress,
    OpError,
    RealServerKey,
    VirtualServerKey,
)

if TYPE_CHECKING:
    from pyroute2.conntrack import Conntrack

# ctnetlink (linux/netfilter/nfnetlink_conntrack.h)
CT_DELETE = (1 << 8) | 2  # NFNL_SUBSYS_CTNETLINK << 8 | IPCTNL_MSG_CT_DELETE
NFNETLINK_V0 = 0
NFGEN_HEADER = struct.Struct("=BBH")
CTA_TUPLE_ORIG, CTA_TUPLE_IP, CTA_TUPLE_PROTO = 1, 1, 2
CTA_IP_V4_SRC, CTA_IP_V4_DST, CTA_IP_V6_SRC, CTA_IP_V6_DST = 1, 2, 3, 4
CTA_PROTO_NUM, CTA_PROTO_SRC_PORT, CTA_PROTO_DST_PORT = 1, 2, 3

# A service (with its protocol) and the endpoint its flows were NATed to.
FlowTarget = tuple[VirtualServerKey, RealServerKey]


@dataclass(frozen=True, slots=True)
class Flow:
    """One tracked flow: a client's packets to a service, NATed to one endpoint."""

    service: VirtualServerKey  # the original destination, with the flow's protocol
    endpoint: RealServerKey  # the source of the replies
    client: IPAddress
    client_port: int

    def target(self) -> FlowTarget:
        """The (service, endpoint) a delete request names to reach this flow."""
        return self.service, self.endpoint


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


def delete_request(flow: Flow) -> Request:
    """An IPCTNL_MSG_CT_DELETE request naming the flow by its original tuple."""
    v6 = flow.client.version == 6
    addresses = attribute(CTA_IP_V6_SRC if v6 else CTA_IP_V4_SRC, flow.client.packed)
    addresses += attribute(CTA_IP_V6_DST if v6 else CTA_IP_V4_DST, flow.service.address.packed)
    ports = attribute(CTA_PROTO_NUM, bytes([IP_PROTOCOL_NUMBERS[flow.service.protocol]]))
    ports += attribute(CTA_PROTO_SRC_PORT, struct.pack(">H", flow.client_port))
    ports += attribute(CTA_PROTO_DST_PORT, struct.pack(">H", flow.service.port))
    original = attribute(NLA_F_NESTED | CTA_TUPLE_IP, addresses)
    original += attribute(NLA_F_NESTED | CTA_TUPLE_PROTO, ports)
    header = NFGEN_HEADER.pack(_family(flow.client), NFNETLINK_V0, 0)
    return CT_DELETE, 0, header + attribute(NLA_F_NESTED | CTA_TUPLE_ORIG, original)


class NetlinkConntrack:
    """The kernel's conntrack table through ctnetlink (nf_conntrack_netlink).

    The kernel cannot delete by a partial tuple, so this dumps the flows to the services'
    ports (once per protocol and port, however many endpoints go) and deletes each one to
    their addresses whose replies come from the endpoints, as kube-proxy does; the deletes
    go out many per sendmsg, each refusal mapped back to its target.
    """

    def __init__(self, batch_size: int = BATCH_SIZE) -> None:
        # pyroute2 for the filtered dumps, made at the first (importing it, asyncio with it,
        # was a third of the imports of a sync with nothing to flush); the deletes go out
        # many per sendmsg.
        self._tables: dict[int, Conntrack] = {}
        self._socket = BatchSocket(NETLINK_NETFILTER, batch_size)

    def close(self) -> None:
        for table in self._tables.values():
            table.close()
        self._socket.close()

    def _table(self, version: int) -> Conntrack:
        if version not in self._tables:
            from pyroute2.conntrack import Conntrack  # noqa: PLC0415

            family = socket.AF_INET if version == 4 else socket.AF_INET6
            self._tables[version] = Conntrack(nfgen_family=family)
        return self._tables[version]

    def __enter__(self) -> NetlinkConntrack:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def delete_entries(self, targets: Sequence[FlowTarget]) -> list[int | OpError]:
        owners: dict[FlowTarget, list[int]] = {}
        for index, target in enumerate(targets):
            owners.setdefault(target, []).append(index)
        requests: list[Request] = []
        requested_by: list[int] = []
        for flow in self._flows_to({(service, endpoint) for service, endpoint in targets}):
            for index in owners.get(flow.target(), ()):
                requests.append(delete_request(flow))
                requested_by.append(index)
        results: list[int | OpError] = [0] * len(targets)
        for index, error in zip(requested_by, self._socket.apply(requests), strict=True):
            done = results[index]
            if isinstance(done, OpError):
                continue
            if error is None:
                results[index] = done + 1
            # A flow may expire between the dump and its delete: gone either way.
            elif error.errno != errno.ENOENT:
                results[index] = error
        return results

    def _flows_to(self, targets: set[FlowTarget]) -> list[Flow]:
        """The flows to the targets' protocols and ports, one filtered dump for each pair.

        The kernel filters by protocol and port; by address too, but in the lab's 6.1 kernel
        an IPv6 address filter matched nothing, so the caller compares the address.
        """
        found = []
        ports = {(s.address.version, s.protocol, s.port) for s, _ in targets}
        with refusals_as_os_errors():
            from pyroute2.conntrack import NFCTAttrTuple  # noqa: PLC0415

            for version, protocol, port in sorted(ports):
                to_port = NFCTAttrTuple(
                    family=socket.AF_INET if version == 4 else socket.AF_INET6,
                    proto=IP_PROTOCOL_NUMBERS[protocol],
                    dport=port,
                )
                for message in self._table(version).dump(tuple_orig=to_port):
                    flow = decode_flow(message)
                    if flow is not None:
                        found.append(flow)
        return found
