"""The IPVS contract: what NetlinkIPVS does in the kernel, FakeIPVS does in memory."""

from __future__ import annotations

import errno
import ipaddress

import pytest

from ipvsproxy.kernel.protocols import IPVSKernel
from ipvsproxy.model import (
    SCHEDULERS,
    AddRealServer,
    AddVirtualServer,
    DeleteRealServer,
    DeleteVirtualServer,
    ForwardMethod,
    IPVSTimeouts,
    RealServer,
    RealServerKey,
    RealServerState,
    ServiceFlags,
    TrafficStats,
    TransportProtocol,
    UpdateRealServer,
    UpdateVirtualServer,
    VirtualServer,
    VirtualServerKey,
    VirtualServerState,
)

VIP = {4: ipaddress.ip_address("10.96.0.10"), 6: ipaddress.ip_address("fd00:10:96::10")}
POD = {4: ipaddress.ip_address("10.244.0.5"), 6: ipaddress.ip_address("fd00:10:244::5")}


def _key(
    family: int, port: int = 80, protocol: TransportProtocol = TransportProtocol.TCP
) -> VirtualServerKey:
    return VirtualServerKey(protocol, VIP[family], port)


def _real(family: int, weight: int = 1, port: int = 8080) -> RealServer:
    return RealServer(RealServerKey(POD[family], port), weight=weight)


@pytest.mark.parametrize("family", [4, 6])
@pytest.mark.parametrize("protocol", list(TransportProtocol))
def test_added_virtual_and_real_servers_read_back_equal(
    ipvs: IPVSKernel, family: int, protocol: TransportProtocol
) -> None:
    server = VirtualServer(_key(family, protocol=protocol), scheduler="rr")
    real = RealServer(RealServerKey(POD[family], 8080), weight=3, upper_threshold=9)

    assert ipvs.apply([AddVirtualServer(server), AddRealServer(server.key, real)]) == [None, None]

    state = ipvs.dump()[server.key]
    assert state.server == server
    assert {key: rs.server for key, rs in state.real_servers.items()} == {real.key: real}
    assert state.real_servers[real.key].server.forward is ForwardMethod.MASQUERADE


@pytest.mark.parametrize("scheduler", sorted(SCHEDULERS))
def test_every_scheduler_reads_back(ipvs: IPVSKernel, scheduler: str) -> None:
    server = VirtualServer(_key(4), scheduler=scheduler)

    assert ipvs.apply([AddVirtualServer(server)]) == [None]

    assert ipvs.dump()[server.key].server.scheduler == scheduler


@pytest.mark.parametrize(
    ("scheduler", "flags", "timeout"),
    [
        ("rr", ServiceFlags.PERSISTENT, 10800),
        ("sh", ServiceFlags.SCHED1 | ServiceFlags.SCHED2, 0),
        ("mh", ServiceFlags.SCHED1, 0),
        ("mh", ServiceFlags.SCHED2, 0),
    ],
)
def test_flags_and_timeout_read_back_without_hashed(
    ipvs: IPVSKernel, scheduler: str, flags: ServiceFlags, timeout: int
) -> None:
    server = VirtualServer(_key(4), scheduler=scheduler, flags=flags, timeout=timeout)

    assert ipvs.apply([AddVirtualServer(server)]) == [None]

    assert ipvs.dump()[server.key].server == server


@pytest.mark.parametrize("family", [4, 6])
def test_updates_read_back_including_weight_zero(ipvs: IPVSKernel, family: int) -> None:
    server = VirtualServer(_key(family))
    ipvs.apply([AddVirtualServer(server), AddRealServer(server.key, _real(family, weight=5))])
    changed = VirtualServer(server.key, scheduler="wrr", flags=ServiceFlags.PERSISTENT, timeout=60)

    results = ipvs.apply(
        [UpdateVirtualServer(changed), UpdateRealServer(server.key, _real(family, weight=0))]
    )

    assert results == [None, None]
    state = ipvs.dump()[server.key]
    assert state.server == changed
    assert state.real_servers[_real(family).key].server.weight == 0


@pytest.mark.parametrize("family", [4, 6])
def test_deletes_remove(ipvs: IPVSKernel, family: int) -> None:
    server = VirtualServer(_key(family))
    ipvs.apply([AddVirtualServer(server), AddRealServer(server.key, _real(family))])

    assert ipvs.apply([DeleteRealServer(server.key, _real(family).key)]) == [None]
    assert ipvs.dump()[server.key].real_servers == {}
    assert ipvs.apply([DeleteVirtualServer(server.key)]) == [None]
    assert server.key not in ipvs.dump()


@pytest.mark.parametrize("family", [4, 6])
def test_a_dump_leaves_out_the_real_servers_or_their_traffic_when_asked(
    ipvs: IPVSKernel, family: int
) -> None:
    server = VirtualServer(_key(family))
    reals = [_real(family, port=port, weight=port - 8079) for port in (8080, 8081)]
    ipvs.apply([AddVirtualServer(server), *(AddRealServer(server.key, r) for r in reals)])

    whole = ipvs.dump()[server.key]
    bare = ipvs.dump(real_servers=False)[server.key]
    quiet = ipvs.dump(traffic=False)[server.key]

    assert len(whole.real_servers) == 2
    assert bare.server == quiet.server == whole.server
    assert bare.real_servers == {}

    def seen(state: RealServerState) -> tuple[RealServer, int, int, int]:
        return (
            state.server,
            state.active_connections,
            state.inactive_connections,
            state.persistent_connections,
        )

    assert {k: seen(s) for k, s in quiet.real_servers.items()} == {
        k: seen(s) for k, s in whole.real_servers.items()
    }
    assert {s.stats for s in quiet.real_servers.values()} == {TrafficStats()}


def _assert_read_as_dumped(
    ipvs: IPVSKernel, key: VirtualServerKey, state: VirtualServerState | None
) -> None:
    """``state``, read alone, holds the virtual and real servers a whole dump has for ``key``."""
    dumped = ipvs.dump()[key]
    assert state is not None
    assert state.server == dumped.server
    assert {k: rs.server for k, rs in state.real_servers.items()} == {
        k: rs.server for k, rs in dumped.real_servers.items()
    }


@pytest.mark.parametrize("family", [4, 6])
def test_one_virtual_server_reads_back_as_the_dump_has_it_and_only_it(
    ipvs: IPVSKernel, family: int
) -> None:
    server = VirtualServer(_key(family), scheduler="wrr")
    neighbour = VirtualServer(_key(family, port=443))
    draining = _real(family, weight=0, port=9090)
    ipvs.apply(
        [
            AddVirtualServer(server),
            AddRealServer(server.key, _real(family, weight=4)),
            AddRealServer(server.key, draining),
            AddVirtualServer(neighbour),
            AddRealServer(neighbour.key, _real(family, port=8443)),
        ]
    )

    for key in (server.key, neighbour.key):
        _assert_read_as_dumped(ipvs, key, ipvs.virtual_server(key))
    state = ipvs.virtual_server(server.key)
    assert state is not None
    assert {k: rs.server for k, rs in state.real_servers.items()} == {
        _real(family).key: _real(family, weight=4),
        draining.key: draining,
    }


@pytest.mark.parametrize("family", [4, 6])
def test_the_listing_holds_the_dump_without_real_servers_as_of_its_first_step(
    ipvs: IPVSKernel, family: int
) -> None:
    first, second, later = (VirtualServer(_key(family, port=port)) for port in (80, 443, 8443))
    ipvs.apply(
        [AddVirtualServer(first), AddRealServer(first.key, _real(family)), AddVirtualServer(second)]
    )
    dumped = ipvs.dump(real_servers=False)
    listing = ipvs.listed()
    taken = [next(listing)]
    assert ipvs.apply([DeleteVirtualServer(second.key), AddVirtualServer(later)]) == [None, None]
    taken += listing

    assert taken == list(dumped.values())
    assert all(not state.real_servers for state in taken)


@pytest.mark.parametrize("family", [4, 6])
def test_a_listed_virtual_server_gets_the_real_servers_it_has_when_read(
    ipvs: IPVSKernel, family: int
) -> None:
    server = VirtualServer(_key(family), scheduler="wrr")
    empty = VirtualServer(_key(family, port=443))
    draining = _real(family, weight=0, port=9090)
    ipvs.apply(
        [
            AddVirtualServer(server),
            AddRealServer(server.key, _real(family, weight=4)),
            AddVirtualServer(empty),
        ]
    )
    listed = ipvs.dump(real_servers=False)
    assert ipvs.apply([AddRealServer(server.key, draining)]) == [None]

    for key in (server.key, empty.key):
        for traffic in (True, False):
            _assert_read_as_dumped(ipvs, key, ipvs.with_real_servers(listed[key], traffic=traffic))
    state = ipvs.with_real_servers(listed[server.key])
    assert state is not None
    assert set(state.real_servers) == {_real(family).key, draining.key}

    assert ipvs.apply([DeleteVirtualServer(server.key), DeleteVirtualServer(empty.key)]) == [
        None,
        None,
    ]
    assert ipvs.with_real_servers(listed[server.key]) is None
    assert ipvs.with_real_servers(listed[empty.key]) is None


@pytest.mark.parametrize("family", [4, 6])
def test_a_virtual_server_the_kernel_lacks_reads_as_none(ipvs: IPVSKernel, family: int) -> None:
    server = VirtualServer(_key(family))
    assert ipvs.virtual_server(server.key) is None
    ipvs.apply([AddVirtualServer(server), AddRealServer(server.key, _real(family))])

    assert ipvs.virtual_server(_key(family, port=81)) is None
    assert ipvs.virtual_server(_key(family, protocol=TransportProtocol.UDP)) is None
    assert ipvs.apply([DeleteVirtualServer(server.key)]) == [None]
    assert ipvs.virtual_server(server.key) is None


def _errno(ipvs: IPVSKernel, op: object) -> int | None:
    (result,) = ipvs.apply([op])  # type: ignore[list-item]
    return None if result is None else result.errno


def test_refusals_carry_the_kernel_errno(ipvs: IPVSKernel) -> None:
    server = VirtualServer(_key(4))
    missing = VirtualServer(_key(4, port=81))
    ipvs.apply([AddVirtualServer(server), AddRealServer(server.key, _real(4))])

    assert _errno(ipvs, AddVirtualServer(server)) == errno.EEXIST
    assert _errno(ipvs, UpdateVirtualServer(missing)) == errno.ESRCH
    assert _errno(ipvs, DeleteVirtualServer(missing.key)) == errno.ESRCH
    assert _errno(ipvs, AddVirtualServer(VirtualServer(_key(4, 82), scheduler="nope"))) == (
        errno.ENOENT
    )
    assert _errno(ipvs, AddRealServer(server.key, _real(4))) == errno.EEXIST
    assert _errno(ipvs, UpdateRealServer(server.key, _real(4, port=1))) == errno.ENOENT
    assert _errno(ipvs, DeleteRealServer(server.key, _real(4, port=1).key)) == errno.ENOENT
    assert _errno(ipvs, AddRealServer(missing.key, _real(4))) == errno.ESRCH
    assert _errno(ipvs, AddRealServer(server.key, _real(6))) == errno.EINVAL


def test_a_failed_op_in_a_batch_leaves_the_rest_applied(ipvs: IPVSKernel) -> None:
    first, last = VirtualServer(_key(4, 1)), VirtualServer(_key(4, 3))

    results = ipvs.apply([AddVirtualServer(first), AddVirtualServer(first), AddVirtualServer(last)])

    assert results[0] is None and results[2] is None
    assert results[1] is not None and results[1].errno == errno.EEXIST
    assert {first.key, last.key} <= set(ipvs.dump())


def test_a_thousand_virtual_servers_with_two_real_servers_each_dump_whole(
    ipvs: IPVSKernel,
) -> None:
    ops: list[AddVirtualServer | AddRealServer] = []
    for index in range(1000):
        key = VirtualServerKey(
            TransportProtocol.TCP,
            ipaddress.ip_address(f"10.97.{index // 250}.{index % 250 + 1}"),
            80,
        )
        ops.append(AddVirtualServer(VirtualServer(key)))
        ops += [AddRealServer(key, _real(4, port=port)) for port in (8080, 8081)]

    assert ipvs.apply(ops) == [None] * len(ops)

    table = ipvs.dump()
    created = [op.server.key for op in ops if isinstance(op, AddVirtualServer)]
    assert all(len(table[key].real_servers) == 2 for key in created)


def test_timeouts_set_read_back_and_zero_leaves_one_as_it_is(ipvs: IPVSKernel) -> None:
    before = ipvs.timeouts()
    assert min(before.tcp, before.tcp_fin, before.udp) > 0
    try:
        ipvs.set_timeouts(IPVSTimeouts(tcp=901, tcp_fin=0, udp=31))
        assert ipvs.timeouts() == IPVSTimeouts(tcp=901, tcp_fin=before.tcp_fin, udp=31)
        ipvs.set_timeouts(IPVSTimeouts(tcp_fin=7))
        assert ipvs.timeouts() == IPVSTimeouts(tcp=901, tcp_fin=7, udp=31)
    finally:
        ipvs.set_timeouts(before)
    assert ipvs.timeouts() == before
