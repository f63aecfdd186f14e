"""The conntrack contract: NetlinkConntrack in the kernel and FakeConntrack in memory agree."""

from __future__ import annotations

import ipaddress

import pytest

from ipvsproxy.kernel.conntrack import Flow
from ipvsproxy.kernel.testing import FakeConntrack
from ipvsproxy.model import RealServerKey, TransportProtocol, VirtualServerKey
from tests.lab.conntrack import SeededConntrack

FAMILIES = {
    "IPv4": ("10.96.0.10", "10.244.1.2", "10.244.1.3", "10.244.1.9"),
    "IPv6": ("fd00:10:96::10", "fd00:10:244:1::2", "fd00:10:244:1::3", "fd00:10:244:1::9"),
}


def _flows(family: str, protocol: TransportProtocol) -> tuple[VirtualServerKey, Flow, Flow]:
    """A service and two flows to it: one NATed to each of two endpoints."""
    service, first, second, client = (ipaddress.ip_address(a) for a in FAMILIES[family])
    key = VirtualServerKey(protocol, service, 53)
    return (
        key,
        Flow(key, RealServerKey(first, 8053), client, 40001),
        Flow(key, RealServerKey(second, 8053), client, 40002),
    )


@pytest.mark.parametrize("protocol", [TransportProtocol.UDP, TransportProtocol.SCTP])
@pytest.mark.parametrize("family", FAMILIES)
def test_deletes_exactly_the_flows_of_one_endpoint(
    conntrack: FakeConntrack | SeededConntrack, family: str, protocol: TransportProtocol
) -> None:
    service, gone, staying = _flows(family, protocol)
    conntrack.add_flow(gone)
    conntrack.add_flow(staying)

    assert conntrack.delete_entries([(service, gone.endpoint)]) == [1]

    flows = conntrack.flows()
    assert gone not in flows
    assert staying in flows


@pytest.mark.parametrize("family", FAMILIES)
def test_deleting_nothing_returns_zero(
    conntrack: FakeConntrack | SeededConntrack, family: str
) -> None:
    service, flow, other = _flows(family, TransportProtocol.UDP)
    conntrack.add_flow(flow)

    assert conntrack.delete_entries([(service, other.endpoint)]) == [0]
    elsewhere = VirtualServerKey(TransportProtocol.UDP, service.address, 54)
    assert conntrack.delete_entries([(elsewhere, flow.endpoint)]) == [0]
    assert flow in conntrack.flows()


def test_a_tcp_flow_is_not_deleted_by_a_udp_request(
    conntrack: FakeConntrack | SeededConntrack,
) -> None:
    service, tcp_flow, _ = _flows("IPv4", TransportProtocol.TCP)
    conntrack.add_flow(tcp_flow)

    udp_service = VirtualServerKey(TransportProtocol.UDP, service.address, service.port)
    assert conntrack.delete_entries([(udp_service, tcp_flow.endpoint)]) == [0]
    assert tcp_flow in conntrack.flows()
    assert conntrack.delete_entries([(service, tcp_flow.endpoint)]) == [1]
    assert tcp_flow not in conntrack.flows()


def test_every_flow_of_the_endpoint_is_counted(conntrack: FakeConntrack | SeededConntrack) -> None:
    service, flow, _ = _flows("IPv4", TransportProtocol.UDP)
    for port in range(40001, 40006):
        conntrack.add_flow(Flow(service, flow.endpoint, flow.client, port))

    assert conntrack.delete_entries([(service, flow.endpoint)]) == [5]
    assert not [f for f in conntrack.flows() if f.endpoint == flow.endpoint]


def test_many_targets_go_in_one_call_each_with_its_count(
    conntrack: FakeConntrack | SeededConntrack,
) -> None:
    service, first, second = _flows("IPv4", TransportProtocol.UDP)
    other_service, other, _ = _flows("IPv6", TransportProtocol.UDP)
    for flow in (first, second, other):
        conntrack.add_flow(flow)
    nothing = VirtualServerKey(TransportProtocol.UDP, service.address, 54)

    deleted = conntrack.delete_entries(
        [
            (service, first.endpoint),
            (nothing, first.endpoint),
            (other_service, other.endpoint),
            (service, second.endpoint),
        ]
    )

    assert deleted == [1, 0, 1, 1]
    assert not {first, second, other} & conntrack.flows()
