from __future__ import annotations

import ipaddress
from types import MappingProxyType

from ipvsproxy.model import (
    AddRealServer,
    AddressKind,
    AddVirtualServer,
    DeleteRealServer,
    DeleteVirtualServer,
    DesiredState,
    DesiredVirtualServer,
    IPAddress,
    IPVSOp,
    IPVSTable,
    ObjectKey,
    RealServer,
    RealServerKey,
    RealServerState,
    ServicePortName,
    TransportProtocol,
    UpdateRealServer,
    UpdateVirtualServer,
    VirtualServer,
    VirtualServerKey,
    VirtualServerState,
)
from ipvsproxy.reconcile.ipvs_plan import owned_addresses, plan_ipvs

VIP = ipaddress.ip_address("10.96.0.10")
KEY = VirtualServerKey(TransportProtocol.TCP, VIP, 53)
OWNER = ServicePortName(ObjectKey("kube-system", "kube-dns"), "dns-tcp", TransportProtocol.TCP)
POD_A = RealServer(RealServerKey(ipaddress.ip_address("10.244.1.2"), 53))
POD_B = RealServer(RealServerKey(ipaddress.ip_address("10.244.1.3"), 53))


def desired(*real: RealServer, scheduler: str = "rr", exclude: str | None = None) -> DesiredState:
    wanted = DesiredVirtualServer(
        VirtualServer(KEY, scheduler=scheduler),
        MappingProxyType({r.key: r for r in real}),
        OWNER,
        AddressKind.CLUSTER_IP,
    )
    return DesiredState(
        virtual_servers={KEY: wanted},
        bound_addresses=frozenset({VIP}),
        node_addresses=frozenset(),
        ipsets={},
        iptables=(),
        exclude_cidrs=(ipaddress.ip_network(exclude),) if exclude else (),
    )


def ops_of(state: DesiredState, actual: IPVSTable, owned: frozenset[IPAddress]) -> list[IPVSOp]:
    return list(plan_ipvs(state, actual, owned).ops)


def kernel(
    *real: RealServer, key: VirtualServerKey = KEY
) -> dict[VirtualServerKey, VirtualServerState]:
    return {key: VirtualServerState(VirtualServer(key), {r.key: RealServerState(r) for r in real})}


def test_empty_kernel_gets_the_service_then_its_real_servers() -> None:
    state = desired(POD_B, POD_A)
    assert ops_of(state, {}, owned_addresses(state, ())) == [
        AddVirtualServer(VirtualServer(KEY)),
        AddRealServer(KEY, POD_A),
        AddRealServer(KEY, POD_B),
    ]


def test_nothing_changed_plans_nothing() -> None:
    state = desired(POD_A, POD_B)
    assert ops_of(state, kernel(POD_A, POD_B), owned_addresses(state, ())) == []


def test_only_what_differs_is_written() -> None:
    state = desired(POD_A, scheduler="lc")
    drained_a = RealServer(POD_A.key, weight=0)
    ops = ops_of(state, kernel(drained_a, POD_B), owned_addresses(state, ()))
    assert ops == [
        UpdateVirtualServer(VirtualServer(KEY, scheduler="lc")),
        UpdateRealServer(KEY, POD_A),
        DeleteRealServer(KEY, POD_B.key),
    ]


def test_stale_virtual_servers_go_only_on_owned_addresses_outside_excluded_cidrs() -> None:
    state = desired(POD_A)
    stale = VirtualServerKey(TransportProtocol.UDP, VIP, 53)
    foreign = VirtualServerKey(TransportProtocol.TCP, ipaddress.ip_address("192.0.2.1"), 80)
    excluded = VirtualServerKey(TransportProtocol.TCP, ipaddress.ip_address("10.96.9.9"), 80)
    actual = kernel(POD_A) | kernel(key=stale) | kernel(key=foreign) | kernel(key=excluded)
    owned = owned_addresses(state, [excluded.address])
    assert ops_of(desired(POD_A, exclude="10.96.9.0/24"), actual, owned) == [
        DeleteVirtualServer(stale)
    ]
