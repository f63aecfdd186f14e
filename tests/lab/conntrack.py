"""The real conntrack table with what only tests do to it: seed flows and list them."""

from __future__ import annotations

import socket

from pyroute2.conntrack import NFCTAttrTuple

from ipvsproxy.kernel.conntrack import Flow, NetlinkConntrack, decode_flow
from ipvsproxy.model import IP_PROTOCOL_NUMBERS

# How long a seeded flow lives unless traffic refreshes it.
SEEDED_FLOW_TIMEOUT = 120


def original_tuple(flow: Flow) -> NFCTAttrTuple:
    """The tuple of the flow's first packet, by which the kernel knows the flow."""
    return NFCTAttrTuple(
        family=socket.AF_INET if flow.client.version == 4 else socket.AF_INET6,
        saddr=str(flow.client),
        daddr=str(flow.service.address),
        proto=IP_PROTOCOL_NUMBERS[flow.service.protocol],
        sport=flow.client_port,
        dport=flow.service.port,
    )


class SeededConntrack(NetlinkConntrack):
    """NetlinkConntrack, plus the controls FakeConntrack has, so one contract drives both."""

    def add_flow(self, flow: Flow) -> None:
        """Write a flow into the table, as if its first packet had been NATed."""
        original = original_tuple(flow)
        self._table(flow.client.version).entry(
            "add",
            timeout=SEEDED_FLOW_TIMEOUT,
            tuple_orig=original,
            tuple_reply=NFCTAttrTuple(
                family=original.family,
                saddr=str(flow.endpoint.address),
                daddr=str(flow.client),
                proto=original.proto,
                sport=flow.endpoint.port,
                dport=flow.client_port,
            ),
        )

    def flows(self) -> frozenset[Flow]:
        found = set()
        for version in (4, 6):
            for message in self._table(version).dump():
                flow = decode_flow(message)
                if flow is not None:
                    found.add(flow)
        return frozenset(found)

    def __enter__(self) -> SeededConntrack:
        return self
