from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace

import pytest

from ipvsproxy.kernel.conntrack import Flow
from ipvsproxy.kernel.testing import FakeConntrack, FakeKernel
from ipvsproxy.model import (
    DUMMY_INTERFACE,
    AddIPSetEntries,
    AddRealServer,
    AddVirtualServer,
    BindAddress,
    CreateIPSet,
    DeleteIPSetEntries,
    DeleteRealServer,
    DeleteVirtualServer,
    FlushConntrack,
    IPFamily,
    IPSetContent,
    IPSetSpec,
    IptablesJump,
    IptablesRuleset,
    OpError,
    RealServerKey,
    RealServerRef,
    TransportProtocol,
    UnbindAddress,
    UpdateRealServer,
    VirtualServer,
    VirtualServerKey,
)
from ipvsproxy.reconcile.graceful import DEFAULT_GRACE_PERIOD
from ipvsproxy.reconcile.reconciler import Reconciler, ReconcilerSettings
from tests.unit.reconcile_kit import (
    POD_A,
    POD_B,
    POD_C,
    TCP_VS,
    UDP_VS,
    VIP,
    ManualClock,
    RefusingIPVS,
    desired,
    ip,
    weights,
)

FOREIGN = VirtualServerKey(TransportProtocol.TCP, ip("192.0.2.1"), 80)
OTHER_VIP = ip("10.96.0.20")
STALE = VirtualServerKey(TransportProtocol.TCP, OTHER_VIP, 80)


@pytest.fixture
def fake() -> FakeKernel:
    return FakeKernel()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def reconciler(fake: FakeKernel, clock: ManualClock, grace: float = 60.0) -> Reconciler:
    return Reconciler(fake.kernel(), ReconcilerSettings(grace_period=grace), clock)


def test_first_sync_builds_everything_and_a_second_writes_nothing(
    fake: FakeKernel, clock: ManualClock
) -> None:
    state = desired({TCP_VS: [POD_A, POD_B], UDP_VS: [POD_A]})
    proxy = reconciler(fake, clock)

    first = proxy.sync(state)
    second = proxy.sync(state)

    # kube-proxy's 4 sysctls, kube-ipvs0, VIP, 2 services, 3 reals
    assert first.ok and first.writes == 4 + 1 + 1 + 2 + 3
    assert set(fake.ipvs.dump()) == {TCP_VS, UDP_VS}
    assert fake.addresses.addresses(DUMMY_INTERFACE) == {VIP}
    assert second.ok and second.writes == 0 and second.plan.changes() == ()


def test_only_what_differs_is_planned(fake: FakeKernel, clock: ManualClock) -> None:
    proxy = reconciler(fake, clock)
    proxy.sync(desired({TCP_VS: [POD_A, POD_B]}))

    plan = proxy.plan(desired({TCP_VS: [POD_A, POD_C]}))

    assert plan.changes() == (
        AddRealServer(TCP_VS, POD_C),
        DeleteRealServer(TCP_VS, POD_B.key),  # no connections: nothing to drain
    )


def test_a_foreign_virtual_server_survives_and_stale_ones_of_ours_go(
    fake: FakeKernel, clock: ManualClock
) -> None:
    proxy = reconciler(fake, clock)
    proxy.sync(desired({TCP_VS: [POD_A], STALE: [POD_A]}))
    fake.ipvs.apply([AddVirtualServer(VirtualServer(FOREIGN)), AddRealServer(FOREIGN, POD_B)])

    result = proxy.sync(desired({TCP_VS: [POD_A]}))

    assert result.ok
    assert set(fake.ipvs.dump()) == {TCP_VS, FOREIGN}
    assert fake.addresses.addresses(DUMMY_INTERFACE) == {VIP}  # OTHER_VIP unbound


def test_nothing_inside_exclude_cidrs_is_deleted_or_unbound(
    fake: FakeKernel, clock: ManualClock
) -> None:
    proxy = reconciler(fake, clock)
    proxy.sync(desired({TCP_VS: [POD_A], STALE: [POD_A]}))

    result = proxy.sync(desired({TCP_VS: [POD_A]}, exclude=["10.96.0.16/28"]))

    assert result.ok and result.writes == 0
    assert set(fake.ipvs.dump()) == {TCP_VS, STALE}
    assert fake.addresses.addresses(DUMMY_INTERFACE) == {VIP, OTHER_VIP}


def test_node_port_virtual_servers_are_ours_without_binding_the_node_address(
    fake: FakeKernel, clock: ManualClock
) -> None:
    node_port = VirtualServerKey(TransportProtocol.TCP, ip("10.240.0.10"), 30080)
    proxy = reconciler(fake, clock)
    proxy.sync(desired({TCP_VS: [POD_A], node_port: [POD_A]}, node_ports=[node_port]))
    assert fake.addresses.addresses(DUMMY_INTERFACE) == {VIP}

    proxy.sync(desired({TCP_VS: [POD_A]}, node_addresses=[node_port.address]))

    assert set(fake.ipvs.dump()) == {TCP_VS}


def test_removed_tcp_real_server_drains_then_goes_when_its_connections_end(
    fake: FakeKernel, clock: ManualClock
) -> None:
    proxy = reconciler(fake, clock)
    proxy.sync(desired({TCP_VS: [POD_A, POD_B]}))
    fake.ipvs.set_connections(TCP_VS, POD_B.key, active=1, inactive=2)

    draining = proxy.sync(desired({TCP_VS: [POD_A]}))
    waiting = proxy.sync(desired({TCP_VS: [POD_A]}))
    fake.ipvs.set_connections(TCP_VS, POD_B.key, active=0, inactive=0)
    drained = proxy.sync(desired({TCP_VS: [POD_A]}))

    assert draining.applied == (UpdateRealServer(TCP_VS, replace(POD_B, weight=0)),)
    assert [d.ref for d in draining.draining] == [RealServerRef(TCP_VS, POD_B.key)]
    assert (draining.draining[0].active_connections, draining.draining[0].inactive_connections) == (
        1,
        2,
    )
    assert waiting.writes == 0 and len(waiting.draining) == 1
    assert drained.applied == (DeleteRealServer(TCP_VS, POD_B.key),)
    assert drained.draining == ()
    assert weights(fake.ipvs.dump(), TCP_VS) == {POD_A.key: 1}


@pytest.mark.parametrize(("waited", "deleted"), [(59.0, False), (60.0, True)])
def test_a_drain_ends_after_the_grace_period_even_with_connections(
    fake: FakeKernel, clock: ManualClock, waited: float, deleted: bool
) -> None:
    proxy = reconciler(fake, clock, grace=60.0)
    proxy.sync(desired({TCP_VS: [POD_A, POD_B]}))
    fake.ipvs.set_connections(TCP_VS, POD_B.key, active=5)
    proxy.sync(desired({TCP_VS: [POD_A]}))

    clock.now += waited
    proxy.sync(desired({TCP_VS: [POD_A]}))

    assert (POD_B.key not in weights(fake.ipvs.dump(), TCP_VS)) is deleted


def test_the_default_grace_period_is_bounded() -> None:
    assert 0 < ReconcilerSettings().grace_period == DEFAULT_GRACE_PERIOD <= 3600


def test_an_endpoint_that_returns_while_draining_gets_its_weight_back(
    fake: FakeKernel, clock: ManualClock
) -> None:
    proxy = reconciler(fake, clock)
    proxy.sync(desired({TCP_VS: [POD_A, POD_B]}))
    fake.ipvs.set_connections(TCP_VS, POD_B.key, active=1)
    proxy.sync(desired({TCP_VS: [POD_A]}))

    back = proxy.sync(desired({TCP_VS: [POD_A, POD_B]}))

    assert back.applied == (UpdateRealServer(TCP_VS, POD_B),)
    assert back.draining == ()
    assert weights(fake.ipvs.dump(), TCP_VS) == {POD_A.key: 1, POD_B.key: 1}


@pytest.mark.parametrize("protocol", [TransportProtocol.UDP, TransportProtocol.SCTP])
def test_udp_and_sctp_real_servers_go_at_once_and_their_flows_are_flushed(
    fake: FakeKernel, clock: ManualClock, protocol: TransportProtocol
) -> None:
    service = replace(UDP_VS, protocol=protocol)
    proxy = reconciler(fake, clock)
    proxy.sync(desired({service: [POD_A, POD_B]}))
    fake.ipvs.set_connections(service, POD_B.key, active=0, inactive=3)
    to_a = Flow(service, POD_A.key, ip("10.244.9.9"), 40000)
    to_b = Flow(service, POD_B.key, ip("10.244.9.9"), 40001)
    fake.conntrack.add_flow(to_a)
    fake.conntrack.add_flow(to_b)

    result = proxy.sync(desired({service: [POD_A]}))

    assert result.applied == (
        DeleteRealServer(service, POD_B.key),
        FlushConntrack(service, POD_B.key),
    )
    assert fake.conntrack.flows() == {to_a}


@dataclass
class RefusingConntrack:
    """A FakeConntrack that refuses the flows of one endpoint, as the kernel might (EPERM)."""

    inner: FakeConntrack
    refused: RealServerKey

    def delete_entries(
        self, targets: Sequence[tuple[VirtualServerKey, RealServerKey]]
    ) -> list[int | OpError]:
        counts = self.inner.delete_entries(targets)
        refusal = OpError(errno.EPERM, os.strerror(errno.EPERM))
        return [
            refusal if real == self.refused else n
            for (_, real), n in zip(targets, counts, strict=True)
        ]


def test_conntrack_flushes_of_one_sync_go_in_one_call_and_a_refusal_is_its_own_failure(
    fake: FakeKernel, clock: ManualClock
) -> None:
    proxy = Reconciler(
        replace(fake.kernel(), conntrack=RefusingConntrack(fake.conntrack, POD_B.key)),
        ReconcilerSettings(grace_period=60.0),
        clock,
    )
    proxy.sync(desired({TCP_VS: [POD_A], UDP_VS: [POD_A, POD_B, POD_C]}))

    result = proxy.sync(desired({TCP_VS: [POD_A], UDP_VS: [POD_A]}))

    assert [str(failure) for failure in result.failures] == [
        f"flush conntrack entries of {UDP_VS} to {POD_B.key}: Operation not permitted"
    ]
    assert FlushConntrack(UDP_VS, POD_C.key) in result.applied


def test_a_stale_udp_virtual_server_goes_whole_and_its_flows_are_flushed(
    fake: FakeKernel, clock: ManualClock
) -> None:
    proxy = reconciler(fake, clock)
    proxy.sync(desired({TCP_VS: [POD_A], UDP_VS: [POD_A, POD_B]}))
    fake.conntrack.add_flow(Flow(UDP_VS, POD_B.key, ip("10.244.9.9"), 40000))

    result = proxy.sync(desired({TCP_VS: [POD_A]}))

    assert result.applied == (
        DeleteVirtualServer(UDP_VS),
        FlushConntrack(UDP_VS, POD_A.key),
        FlushConntrack(UDP_VS, POD_B.key),
    )
    assert fake.conntrack.flows() == frozenset()


def test_a_new_instance_adopts_the_kernel_and_restores_weights_left_at_zero(
    fake: FakeKernel, clock: ManualClock
) -> None:
    state = desired({TCP_VS: [POD_A, POD_B]})
    reconciler(fake, clock).sync(state)
    # An interrupted run left A at weight 0 while A is still desired (kube-proxy #92019) ...
    fake.ipvs.apply([UpdateRealServer(TCP_VS, replace(POD_A, weight=0))])
    # ... and C at weight 0 with a connection, no longer desired: a drain to resume.
    fake.ipvs.apply([AddRealServer(TCP_VS, replace(POD_C, weight=0))])
    fake.ipvs.set_connections(TCP_VS, POD_C.key, active=1)

    result = reconciler(fake, clock).sync(state)

    assert result.applied == (UpdateRealServer(TCP_VS, POD_A),)
    assert [d.ref.real for d in result.draining] == [POD_C.key]
    assert result.drift == {}
    assert weights(fake.ipvs.dump(), TCP_VS) == {POD_A.key: 1, POD_B.key: 1, POD_C.key: 0}


def test_an_adopted_drain_is_bounded_from_when_this_instance_saw_it(
    fake: FakeKernel, clock: ManualClock
) -> None:
    reconciler(fake, clock).sync(desired({TCP_VS: [POD_A, POD_B]}))
    fake.ipvs.apply([UpdateRealServer(TCP_VS, replace(POD_B, weight=0))])
    fake.ipvs.set_connections(TCP_VS, POD_B.key, active=1)
    adopter = reconciler(fake, clock, grace=60.0)
    adopter.sync(desired({TCP_VS: [POD_A]}))

    clock.now += 60.0
    adopter.sync(desired({TCP_VS: [POD_A]}))

    assert weights(fake.ipvs.dump(), TCP_VS) == {POD_A.key: 1}


def test_drift_is_repaired_and_counted_by_kind(fake: FakeKernel, clock: ManualClock) -> None:
    state = desired({TCP_VS: [POD_A, POD_B], UDP_VS: [POD_A]})
    proxy = reconciler(fake, clock)
    proxy.sync(state)
    fake.ipvs.apply([DeleteVirtualServer(key) for key in fake.ipvs.dump()])  # ipvsadm -C
    fake.addresses.delete_interface(DUMMY_INTERFACE)

    repaired = proxy.sync(state)

    assert repaired.ok
    assert repaired.drift == {"interface": 1, "address": 1, "virtual_server": 2, "real_server": 3}
    assert set(fake.ipvs.dump()) == {TCP_VS, UDP_VS}


def test_a_desired_change_is_not_drift(fake: FakeKernel, clock: ManualClock) -> None:
    proxy = reconciler(fake, clock)
    proxy.sync(desired({TCP_VS: [POD_A]}))

    changed = proxy.sync(desired({TCP_VS: [POD_A, POD_B]}))

    assert changed.applied == (AddRealServer(TCP_VS, POD_B),)
    assert changed.drift == {}


def test_a_refused_op_is_reported_the_rest_applies_and_the_next_sync_retries(
    fake: FakeKernel, clock: ManualClock
) -> None:
    refused = AddRealServer(UDP_VS, POD_B)
    refusing = RefusingIPVS(fake.ipvs, {refused})
    proxy = Reconciler(replace(fake.kernel(), ipvs=refusing), clock=clock)
    state = desired({TCP_VS: [POD_A, POD_B], UDP_VS: [POD_A, POD_B]})

    failed = proxy.sync(state)
    refusing.refuse.clear()
    retried = proxy.sync(state)

    assert [str(f) for f in failed.failures] == [
        "add real server 10.244.1.3:8080 to UDP 10.96.0.10:53: File exists"
    ]
    assert failed.failures[0].error.errno == 17
    assert weights(fake.ipvs.dump(), TCP_VS) == {POD_A.key: 1, POD_B.key: 1}
    assert retried.ok and retried.applied == (refused,)
    assert retried.drift == {}  # never applied before, so not drift


def test_real_servers_are_not_removed_where_the_replacement_failed(
    fake: FakeKernel, clock: ManualClock
) -> None:
    proxy = reconciler(fake, clock)
    proxy.sync(desired({UDP_VS: [POD_A]}))
    refusing = RefusingIPVS(fake.ipvs, {AddRealServer(UDP_VS, POD_B)})
    proxy = Reconciler(replace(fake.kernel(), ipvs=refusing), clock=clock)

    rolled = proxy.sync(desired({UDP_VS: [POD_B]}))

    assert len(rolled.failures) == 1
    assert rolled.held_back == (
        DeleteRealServer(UDP_VS, POD_A.key),
        FlushConntrack(UDP_VS, POD_A.key),
    )
    assert weights(fake.ipvs.dump(), UDP_VS) == {POD_A.key: 1}


def test_an_address_stays_bound_while_its_stale_virtual_server_could_not_go(
    fake: FakeKernel, clock: ManualClock
) -> None:
    proxy = reconciler(fake, clock)
    proxy.sync(desired({TCP_VS: [POD_A], STALE: [POD_A]}))
    refusing = RefusingIPVS(fake.ipvs, {DeleteVirtualServer(STALE)})
    proxy = Reconciler(replace(fake.kernel(), ipvs=refusing), clock=clock)

    first = proxy.sync(desired({TCP_VS: [POD_A]}))
    refusing.refuse.clear()
    proxy.sync(desired({TCP_VS: [POD_A]}))

    assert first.held_back == (UnbindAddress(OTHER_VIP),)
    assert set(fake.ipvs.dump()) == {TCP_VS}
    assert fake.addresses.addresses(DUMMY_INTERFACE) == {VIP}


def test_a_virtual_server_on_a_node_address_nothing_names_any_more_goes_even_after_a_refusal(
    fake: FakeKernel, clock: ManualClock
) -> None:
    on_node = VirtualServerKey(TransportProtocol.TCP, ip("10.240.0.10"), 80)
    refusing = RefusingIPVS(fake.ipvs, set())
    proxy = Reconciler(replace(fake.kernel(), ipvs=refusing), clock=clock)
    proxy.sync(desired({TCP_VS: [POD_A], on_node: [POD_A]}, node_ports=[on_node]))
    refusing.refuse.add(DeleteVirtualServer(on_node))

    refused = proxy.sync(desired({TCP_VS: [POD_A]}))
    refusing.refuse.clear()
    retried = proxy.sync(desired({TCP_VS: [POD_A]}))

    assert [failure.op for failure in refused.failures] == [DeleteVirtualServer(on_node)]
    assert retried.ok and retried.applied == (DeleteVirtualServer(on_node),)
    assert set(fake.ipvs.dump()) == {TCP_VS}


SETS = {
    "KUBE-CLUSTER-IP": IPSetContent(
        IPSetSpec("KUBE-CLUSTER-IP", "hash:ip,port"), frozenset({"10.96.0.10,tcp:80"})
    ),
}


def test_our_ipsets_are_created_filled_and_trimmed_and_others_left_alone(
    fake: FakeKernel, clock: ManualClock
) -> None:
    fake.ipsets.create(IPSetSpec("KUBE-CLUSTER-IP", "hash:ip,port"))
    fake.ipsets.add("KUBE-CLUSTER-IP", ["10.96.0.99,tcp:80"])
    fake.ipsets.create(IPSetSpec("someone-else", "hash:ip"))
    fake.ipsets.add("someone-else", ["192.0.2.7"])
    proxy = reconciler(fake, clock)
    state = desired({TCP_VS: [POD_A]}, ipsets=SETS)
    loop_back = IPSetContent(IPSetSpec("KUBE-LOOP-BACK", "hash:ip,port,ip"), frozenset())
    with_new_set = desired({TCP_VS: [POD_A]}, ipsets={**SETS, "KUBE-LOOP-BACK": loop_back})

    plan = proxy.plan(with_new_set)
    proxy.sync(state)

    assert plan.ipsets == (
        AddIPSetEntries("KUBE-CLUSTER-IP", ("10.96.0.10,tcp:80",)),
        DeleteIPSetEntries("KUBE-CLUSTER-IP", ("10.96.0.99,tcp:80",)),
        CreateIPSet(loop_back.spec),
    )
    sets = fake.ipsets.list_sets()
    assert sets["KUBE-CLUSTER-IP"].entries == {"10.96.0.10,tcp:80"}
    assert sets["someone-else"].entries == {"192.0.2.7"}
    assert proxy.sync(state).writes == 0


def test_a_destroyed_set_is_drift(fake: FakeKernel, clock: ManualClock) -> None:
    proxy = reconciler(fake, clock)
    proxy.sync(desired({TCP_VS: [POD_A]}, ipsets=SETS))
    fake.ipsets.destroy("KUBE-CLUSTER-IP")

    repaired = proxy.sync(desired({TCP_VS: [POD_A]}, ipsets=SETS))

    assert repaired.drift == {"ipset": 1, "ipset_entry": 1}


RULESET = IptablesRuleset(
    IPFamily.IPV4,
    {"nat": {"KUBE-SERVICES": (("-m", "comment", "--comment", "test", "-j", "RETURN"),)}},
    (IptablesJump("nat", "OUTPUT", "KUBE-SERVICES", "kubernetes service portals"),),
)


def test_iptables_are_restored_once_and_counted_only_when_written(
    fake: FakeKernel, clock: ManualClock
) -> None:
    proxy = reconciler(fake, clock)
    state = desired({TCP_VS: [POD_A]}, iptables=(RULESET,))

    first = proxy.sync(state)
    second = proxy.sync(state)

    assert first.ok and any(type(op).__name__ == "RestoreIptables" for op in first.applied)
    assert second.ok and second.writes == 0 and second.applied == ()
    assert fake.iptables.our_chains(IPFamily.IPV4)["nat"] >= {"KUBE-SERVICES"}


def test_addresses_are_bound_before_virtual_servers_and_unbound_last(
    fake: FakeKernel, clock: ManualClock
) -> None:
    proxy = reconciler(fake, clock)
    proxy.sync(desired({STALE: [POD_A]}))

    ops = proxy.plan(desired({TCP_VS: [POD_A]})).operations()

    assert [type(op).__name__ for op in ops] == [
        "BindAddress",
        "AddVirtualServer",
        "AddRealServer",
        "DeleteVirtualServer",
        "UnbindAddress",
    ]
    assert ops[0] == BindAddress(VIP)


def test_refused_iptables_are_a_failure_and_the_rest_still_applies(
    fake: FakeKernel, clock: ManualClock
) -> None:
    missing_set = ("-m", "set", "--match-set", "KUBE-MISSING", "dst,dst", "-j", "RETURN")
    broken = IptablesRuleset(IPFamily.IPV4, {"nat": {"KUBE-SERVICES": (missing_set,)}})
    proxy = reconciler(fake, clock)

    result = proxy.sync(desired({TCP_VS: [POD_A]}, iptables=(broken,)))

    assert [str(f).split(":")[0] for f in result.failures] == ["restore IPv4 iptables chains"]
    assert set(fake.ipvs.dump()) == {TCP_VS}


def test_a_refused_ipset_entry_is_reported_alone_and_the_others_are_added(
    fake: FakeKernel, clock: ManualClock
) -> None:
    spec = IPSetSpec("KUBE-CLUSTER-IP", "hash:ip,port")
    entries = frozenset({"10.96.0.10,tcp:80", "10.96.0.11,tcp:80", "not-an-entry"})
    proxy = reconciler(fake, clock)

    result = proxy.sync(desired({}, ipsets={spec.name: IPSetContent(spec, entries)}))

    assert [str(f).split(":")[0] for f in result.failures] == [
        "add not-an-entry to ipset KUBE-CLUSTER-IP"
    ]
    assert fake.ipsets.list_sets()[spec.name].entries == entries - {"not-an-entry"}


def test_chains_removed_behind_our_back_are_restored_and_counted_as_drift(
    fake: FakeKernel, clock: ManualClock
) -> None:
    proxy = reconciler(fake, clock)
    state = desired({TCP_VS: [POD_A]}, iptables=(RULESET,))
    proxy.sync(state)
    fake.iptables.remove(IPFamily.IPV4, fake.iptables.our_chains(IPFamily.IPV4))

    repaired = proxy.sync(state)

    assert repaired.drift == {"iptables": 1}
    assert "KUBE-SERVICES" in fake.iptables.our_chains(IPFamily.IPV4)["nat"]
