from __future__ import annotations

import ipaddress
from dataclasses import replace
from types import MappingProxyType

from hypothesis import given
from hypothesis import strategies as st

from ipvsproxy.kernel.testing import FakeIPVS
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
from ipvsproxy.reconcile.ipvs_plan import in_sync, owned_addresses, plan_ipvs
from ipvsproxy.reconcile.state import read_ipvs_between

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


PODS = st.lists(
    st.builds(
        RealServer,
        st.sampled_from([POD_A.key, POD_B.key]),
        weight=st.integers(0, 2),
    ),
    max_size=2,
    unique_by=lambda real: real.key,
)


@given(PODS, PODS, st.sampled_from(["rr", "lc"]))
def test_in_sync_is_exactly_when_nothing_is_planned(
    wanted: list[RealServer], held: list[RealServer], scheduler: str
) -> None:
    state = desired(*wanted, scheduler=scheduler)
    actual = kernel(*held)
    planned = plan_ipvs(state, actual, owned_addresses(state, ()), now=1e9)
    assert in_sync(state.virtual_servers[KEY], actual[KEY]) == (
        not planned.ops and not planned.flushes
    )


def test_a_virtual_server_found_as_desired_when_read_is_compared_again_once_that_changes() -> None:
    state = desired(POD_A)
    # Changed in the kernel after the read found it as desired: trusted until the next read.
    changed_since = kernel(POD_B)
    owned = owned_addresses(state, ())
    matched = {KEY: state.virtual_servers[KEY]}
    assert not plan_ipvs(state, changed_since, owned, as_desired=matched).ops
    # An equal desired value of a later translation is another object: compared again.
    later = desired(POD_A)
    assert plan_ipvs(later, changed_since, owned, as_desired=matched).ops == (
        AddRealServer(KEY, POD_A),
        DeleteRealServer(KEY, POD_B.key),
    )


class ReadsLogged(FakeIPVS):
    """Logs the virtual servers read one at a time."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[VirtualServerKey] = []

    def virtual_server(self, key: VirtualServerKey) -> VirtualServerState | None:
        self.reads.append(key)
        return super().virtual_server(key)

    def with_real_servers(
        self, listed: VirtualServerState, *, traffic: bool = True
    ) -> VirtualServerState | None:
        self.reads.append(listed.server.key)
        return super().with_real_servers(listed, traffic=traffic)


def ports(key: VirtualServerKey) -> int:
    return key.port


def test_the_read_between_syncs_gives_what_it_found_as_desired_at_the_end() -> None:
    keys = [VirtualServerKey(TransportProtocol.TCP, VIP, port) for port in (1, 2, 3)]
    wanted = {
        key: DesiredVirtualServer(
            VirtualServer(key), MappingProxyType({POD_A.key: POD_A}), OWNER, AddressKind.CLUSTER_IP
        )
        for key in keys
    }
    ipvs = ReadsLogged()
    ipvs.apply([AddVirtualServer(VirtualServer(key)) for key in keys])
    ipvs.apply([AddRealServer(keys[0], POD_A), AddRealServer(keys[2], POD_B)])
    calls: list[int] = []

    def between() -> list[IPVSOp]:
        calls.append(len(calls))
        if len(calls) != 2:
            return []
        # A sync once the first is read: it moves the first to POD_B, the second to POD_A.
        wanted[keys[0]] = DesiredVirtualServer(
            VirtualServer(keys[0]),
            MappingProxyType({POD_B.key: POD_B}),
            OWNER,
            AddressKind.CLUSTER_IP,
        )
        ops: list[IPVSOp] = [
            AddRealServer(keys[0], POD_B),
            DeleteRealServer(keys[0], POD_A.key),
            AddRealServer(keys[1], POD_A),
        ]
        ipvs.apply(ops)
        return ops

    table, as_desired = read_ipvs_between(ipvs, between, lambda: wanted)

    # What the sync wrote is read again before the read goes on.
    assert ipvs.reads == [keys[0], *sorted(keys[:2], key=ports), keys[1], keys[2]]
    # The first read again after the sync, against its new value; the third differs.
    assert as_desired == {keys[0]: wanted[keys[0]], keys[1]: wanted[keys[1]]}
    held = ipvs.dump(traffic=False)
    assert table == {
        **{key: replace(held[key], real_servers={}) for key in as_desired},
        keys[2]: held[keys[2]],
    }


def test_a_virtual_server_found_as_desired_is_read_again_if_its_value_changed_unwritten() -> None:
    wanted = desired(POD_A)
    ipvs = FakeIPVS()
    ipvs.apply([AddVirtualServer(VirtualServer(KEY)), AddRealServer(KEY, POD_A)])
    newest = {KEY: wanted.virtual_servers[KEY]}
    reads: list[int] = []

    def between() -> list[IPVSOp]:
        reads.append(len(reads))
        if len(reads) == 2:
            # A sync took POD_B, but its write was held back: nothing written.
            newest[KEY] = desired(POD_B).virtual_servers[KEY]
        return []

    table, as_desired = read_ipvs_between(ipvs, between, lambda: newest)

    assert as_desired == {}
    assert table == ipvs.dump(traffic=False)
    assert plan_ipvs(desired(POD_B), table, owned_addresses(wanted, ())).ops == (
        AddRealServer(KEY, POD_B),
        DeleteRealServer(KEY, POD_A.key),
    )
