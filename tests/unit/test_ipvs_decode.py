"""The hand-written decoder of dumped IPVS destinations, on attributes built as the kernel
sends them: traffic counters are read unless the dump leaves them out."""

from __future__ import annotations

import ipaddress
import socket

from ipvsproxy.kernel.ipvs import _encode_attrs, _nested, _real_server_state
from ipvsproxy.model import RealServer, RealServerKey, TrafficStats

DESTINATION = _nested(
    _encode_attrs(
        [
            ("IPVS_DEST_ATTR_ADDR", "10.244.0.5"),
            ("IPVS_DEST_ATTR_PORT", 8080),
            ("IPVS_DEST_ATTR_FWD_METHOD", 0),
            ("IPVS_DEST_ATTR_WEIGHT", 2),
            ("IPVS_DEST_ATTR_ACTIVE_CONNS", 3),
            ("IPVS_DEST_ATTR_INACT_CONNS", 4),
            (
                "IPVS_DEST_ATTR_STATS64",
                {
                    "attrs": [
                        ("IPVS_STATS_ATTR_CONNS", 5),
                        ("IPVS_STATS_ATTR_INPKTS", 6),
                        ("IPVS_STATS_ATTR_OUTPKTS", 7),
                        ("IPVS_STATS_ATTR_INBYTES", 8),
                        ("IPVS_STATS_ATTR_OUTBYTES", 9),
                    ]
                },
            ),
        ]
    )
)
SERVER = RealServer(RealServerKey(ipaddress.ip_address("10.244.0.5"), 8080), weight=2)


def test_a_destination_reads_with_its_traffic() -> None:
    state = _real_server_state(DESTINATION, socket.AF_INET)

    assert state.server == SERVER
    assert (state.active_connections, state.inactive_connections) == (3, 4)
    assert state.stats == TrafficStats(5, 6, 7, 8, 9)


def test_without_traffic_the_connections_are_still_read() -> None:
    state = _real_server_state(DESTINATION, socket.AF_INET, traffic=False)

    assert state.server == SERVER
    assert (state.active_connections, state.inactive_connections) == (3, 4)
    assert state.stats == TrafficStats()
