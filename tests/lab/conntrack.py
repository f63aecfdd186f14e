"""The real conntrack table with what only tests do to it: seed flows and list them."""

from __future__ import annotations

from pyroute2.conntrack import NFCTAttrTuple

from ipvsproxy.kernel.conntrack import Flow, NetlinkConntrack, decode_flow, original_tuple

# How long a seeded flow lives unless traffic refreshes it.
SEEDED_FLOW_TIMEOUT = 120


class SeededConntrack(NetlinkConntrack):
    """NetlinkConntrack, plus the controls FakeConntrack has, so one contract drives both."""

    def add_flow(self, flow: Flow) -> None:
        """Write a flow into the table, as if its first packet had been NATed."""
        original = original_tuple(flow)
        self._tables[flow.client.version].entry(
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
        for table in self._tables.values():
            for message in table.dump():
                flow = decode_flow(message)
                if flow is not None:
                    found.add(flow)
        return frozenset(found)

    def __enter__(self) -> SeededConntrack:
        return self
