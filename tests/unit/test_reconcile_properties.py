"""For any desired state and any kernel table, one sync converges: the next plans nothing."""

from __future__ import annotations

from dataclasses import dataclass, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from ipvsproxy.kernel.testing import FakeKernel
from ipvsproxy.model import (
    DUMMY_INTERFACE,
    AddRealServer,
    AddVirtualServer,
    BindAddress,
    DesiredState,
    IPAddress,
    RealServer,
    RealServerKey,
    TransportProtocol,
    VirtualServer,
    VirtualServerKey,
)
from ipvsproxy.reconcile.reconciler import Reconciler
from tests.unit.reconcile_kit import ManualClock, RefusingIPVS, desired, ip

SERVICE_IPS = [ip("10.96.0.10"), ip("10.96.0.20")]
NODE_IP = ip("10.240.0.10")
FOREIGN_IP = ip("192.0.2.1")
KEYS = [
    VirtualServerKey(protocol, address, port)
    for protocol in (TransportProtocol.TCP, TransportProtocol.UDP)
    for address in (*SERVICE_IPS, NODE_IP, FOREIGN_IP)
    for port in (80, 30080)
]
REALS = [RealServerKey(ip(f"10.244.1.{n}"), 8080) for n in (2, 3, 4)]


@dataclass(frozen=True)
class ActualReal:
    key: RealServerKey
    weight: int
    active: int


actual_reals = st.lists(
    st.builds(
        ActualReal, st.sampled_from(REALS), st.sampled_from([0, 1, 3]), st.sampled_from([0, 2])
    ),
    unique_by=lambda r: r.key,
    max_size=3,
)
actual_tables = st.dictionaries(
    st.sampled_from(KEYS), st.tuples(st.sampled_from(["rr", "lc"]), actual_reals), max_size=6
)
desired_tables = st.dictionaries(
    st.sampled_from([k for k in KEYS if k.address != FOREIGN_IP]),
    st.lists(st.sampled_from(REALS), unique=True, max_size=3),
    max_size=5,
)


def _kernel_and_state(
    wanted: dict[VirtualServerKey, list[RealServerKey]],
    actual: dict[VirtualServerKey, tuple[str, list[ActualReal]]],
    bound: set[IPAddress],
) -> tuple[FakeKernel, DesiredState]:
    fake = FakeKernel()
    fake.addresses.ensure_interface(DUMMY_INTERFACE)
    fake.addresses.apply(DUMMY_INTERFACE, [BindAddress(a) for a in SERVICE_IPS if a in bound])
    for key, (scheduler, present) in actual.items():
        fake.ipvs.apply([AddVirtualServer(VirtualServer(key, scheduler))])
        for real in present:
            fake.ipvs.apply([AddRealServer(key, RealServer(real.key, weight=real.weight))])
            fake.ipvs.set_connections(key, real.key, real.active)
    node_ports = [k for k in wanted if k.address == NODE_IP]
    state = desired(
        {key: [RealServer(r) for r in reals] for key, reals in wanted.items()},
        node_ports=node_ports,
        node_addresses=[NODE_IP],
    )
    return fake, state


@settings(deadline=None, max_examples=150)
@given(desired_tables, actual_tables, st.sets(st.sampled_from(SERVICE_IPS)))
def test_one_sync_converges_and_leaves_what_is_not_ours_alone(
    wanted: dict[VirtualServerKey, list[RealServerKey]],
    actual: dict[VirtualServerKey, tuple[str, list[ActualReal]]],
    bound: set[IPAddress],
) -> None:
    fake, state = _kernel_and_state(wanted, actual, bound)
    proxy = Reconciler(fake.kernel(), clock=ManualClock())

    first = proxy.sync(state)
    again = proxy.plan(state)

    assert first.ok
    assert again.changes() == ()
    table = fake.ipvs.dump()
    for key, reals in wanted.items():
        assert table[key].server == VirtualServer(key)
        serving = {r for r, s in table[key].real_servers.items() if s.server.weight > 0}
        assert serving == set(reals)
    owned = {NODE_IP} | set(bound) | {k.address for k in wanted}
    foreign = {k for k in actual if k.address not in owned}
    assert {k for k in table if k.address not in owned} == foreign
    draining = {(d.ref.virtual, d.ref.real) for d in first.draining}
    leftovers = {
        (key, r)
        for key, current in table.items()
        if key.address in owned
        for r in current.real_servers
        if r not in wanted.get(key, [])
    }
    assert leftovers == draining


@settings(deadline=None, max_examples=150)
@given(desired_tables, actual_tables, st.sets(st.sampled_from(SERVICE_IPS)), st.data())
def test_refused_ops_never_cost_a_desired_real_server_and_the_next_sync_recovers(
    wanted: dict[VirtualServerKey, list[RealServerKey]],
    actual: dict[VirtualServerKey, tuple[str, list[ActualReal]]],
    bound: set[IPAddress],
    data: st.DataObject,
) -> None:
    fake, state = _kernel_and_state(wanted, actual, bound)
    planned = Reconciler(fake.kernel(), clock=ManualClock()).plan(state).ipvs.ops
    refusing = RefusingIPVS(
        fake.ipvs, set(data.draw(st.lists(st.sampled_from(planned)))) if planned else set()
    )
    proxy = Reconciler(replace(fake.kernel(), ipvs=refusing), clock=ManualClock())
    before = fake.ipvs.dump()

    proxy.sync(state)
    after = fake.ipvs.dump()
    refusing.refuse.clear()
    proxy.sync(state)

    for key in wanted.keys() & before.keys():
        assert set(before[key].real_servers) & set(wanted[key]) <= set(after[key].real_servers)
    assert proxy.plan(state).changes() == ()
