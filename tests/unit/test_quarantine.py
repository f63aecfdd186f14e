"""The reconciler's quarantine: a refused object waits alone, with backoff, and is retried."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, replace
from types import MappingProxyType

import pytest

from ipvsproxy.kernel.errors import ErrorClass, error_class, refusal_reason
from ipvsproxy.kernel.preconditions import try_scheduler
from ipvsproxy.kernel.testing import FakeIPVS, FakeKernel
from ipvsproxy.model import (
    SCHEDULERS,
    AddIPSetEntries,
    AddRealServer,
    AddVirtualServer,
    DeleteIPSetEntries,
    DeleteRealServer,
    DeleteVirtualServer,
    DesiredChange,
    DesiredState,
    IPSetContent,
    IPSetSpec,
    IPVSTable,
    OpError,
    RealServerRef,
    SetSysctl,
    UpdateRealServer,
    UpdateVirtualServer,
    VirtualServer,
    VirtualServerKey,
)
from ipvsproxy.reconcile.held import IPSetMember, Parameter, Scheduler
from ipvsproxy.reconcile.quarantine import Backoff, Change, Quarantine
from ipvsproxy.reconcile.reconciler import Reconciler, SyncResult
from tests.unit.reconcile_kit import (
    POD_A,
    POD_B,
    POD_C,
    TCP_VS,
    UDP_VS,
    ManualClock,
    RefusingIPVS,
    desired,
    ip,
)

SED_VS = VirtualServerKey(TCP_VS.protocol, ip("10.96.0.30"), 80)
NO_DRAW = 0.0  # the jitter's draw: none, so delays are exact


def error(code: int) -> OpError:
    return OpError(code, os.strerror(code))


@pytest.mark.parametrize(
    ("op", "code", "expected"),
    [
        (AddVirtualServer(VirtualServer(TCP_VS, "sed")), errno.ENOENT, ErrorClass.REFUSED),
        (UpdateVirtualServer(VirtualServer(TCP_VS, "sed")), errno.ENOENT, ErrorClass.REFUSED),
        (AddRealServer(TCP_VS, POD_A), errno.EINVAL, ErrorClass.REFUSED),
        (SetSysctl("net.ipv4.vs.conntrack", "1", "0"), errno.ENOENT, ErrorClass.REFUSED),
        (SetSysctl("net.ipv4.vs.conntrack", "1", "0"), errno.EROFS, ErrorClass.REFUSED),
        (AddIPSetEntries("KUBE-CLUSTER-IP", ("x",)), errno.EINVAL, ErrorClass.REFUSED),
        (AddVirtualServer(VirtualServer(TCP_VS)), errno.EEXIST, ErrorClass.OUT_OF_STEP),
        (AddRealServer(TCP_VS, POD_A), errno.ESRCH, ErrorClass.OUT_OF_STEP),
        (UpdateRealServer(TCP_VS, POD_A), errno.ENOENT, ErrorClass.OUT_OF_STEP),
        (DeleteRealServer(TCP_VS, POD_A.key), errno.ENOENT, ErrorClass.OUT_OF_STEP),
        (AddIPSetEntries("KUBE-CLUSTER-IP", ("x",)), errno.ENOENT, ErrorClass.OUT_OF_STEP),
        (AddIPSetEntries("KUBE-CLUSTER-IP", ("x",)), 4103, ErrorClass.OUT_OF_STEP),
        (AddVirtualServer(VirtualServer(TCP_VS)), errno.ENOMEM, ErrorClass.TRANSIENT),
        (AddRealServer(TCP_VS, POD_A), errno.ENOBUFS, ErrorClass.TRANSIENT),
        (SetSysctl("net.ipv4.vs.conntrack", "1", "0"), errno.EAGAIN, ErrorClass.TRANSIENT),
        (DeleteVirtualServer(TCP_VS), 0, ErrorClass.TRANSIENT),
    ],
)
def test_the_kernel_s_answer_is_told_by_op_and_errno(
    op: AddVirtualServer, code: int, expected: ErrorClass
) -> None:
    assert error_class(op, OpError(code, "")) is expected


def test_a_refusal_s_reason_is_a_short_bounded_name() -> None:
    missing_module = error(errno.ENOENT)
    assert refusal_reason(AddVirtualServer(VirtualServer(TCP_VS)), missing_module) == (
        "scheduler_unavailable"
    )
    assert refusal_reason(AddRealServer(TCP_VS, POD_A), error(errno.EINVAL)) == "EINVAL"
    assert refusal_reason(AddIPSetEntries("S", ("x",)), OpError(4352, "full")) == "errno_4352"


def test_backoff_doubles_to_its_cap_and_jitter_only_shortens() -> None:
    backoff = Backoff(first=5.0, cap=300.0, jitter=0.2)
    assert [backoff.delay(n, NO_DRAW) for n in (1, 2, 3, 7, 8, 100)] == [
        5.0,
        10.0,
        20.0,
        300.0,
        300.0,
        300.0,
    ]
    assert backoff.delay(1, 0.5) == pytest.approx(4.5)
    assert backoff.delay(100, 0.999) == pytest.approx(300.0 * (1 - 0.2 * 0.999))


class Trials:
    """``try_scheduler`` on the fake kernel, remembering which schedulers were tried."""

    def __init__(self, fake: FakeKernel) -> None:
        self.fake = fake
        self.tried: list[str] = []

    def __call__(self, scheduler: str) -> OpError | None:
        self.tried.append(scheduler)
        return try_scheduler(self.fake.ipvs, scheduler)


@dataclass
class Proxy:
    fake: FakeKernel
    clock: ManualClock
    trials: Trials
    held: Quarantine
    reconciler: Reconciler

    def sync(self, state: DesiredState) -> SyncResult:
        return self.reconciler.sync(state)

    def change(self, state: DesiredState, change: DesiredChange | None = None) -> SyncResult:
        return self.reconciler.sync_change(state, change or nothing_changed())

    def table(self) -> IPVSTable:
        return self.fake.ipvs.dump()

    def later(self, seconds: float) -> None:
        self.clock.now += seconds


def proxy(fake: FakeKernel | None = None) -> Proxy:
    """A reconciler whose kernel cannot load "sed"; backoff 10 s doubling to 40 s, no jitter."""
    if fake is None:
        fake = FakeKernel()
        fake.ipvs = FakeIPVS(SCHEDULERS - {"sed"})
    clock = ManualClock()
    trials = Trials(fake)
    held = Quarantine(
        Backoff(first=10.0, cap=40.0), trials, accepted_schedulers={"rr"}, draw=lambda: NO_DRAW
    )
    return Proxy(fake, clock, trials, held, Reconciler(fake.kernel(), clock=clock, quarantine=held))


def with_sed(state: DesiredState, *keys: VirtualServerKey) -> DesiredState:
    """``state`` with the virtual servers at ``keys`` (SED_VS by default) scheduled by "sed"."""
    servers = dict(state.virtual_servers)
    for key in keys or (SED_VS,):
        servers[key] = replace(servers[key], server=VirtualServer(key, "sed"))
    return replace(state, virtual_servers=MappingProxyType(servers))


def nothing_changed() -> DesiredChange:
    return DesiredChange(
        virtual_servers=MappingProxyType({}),
        added_entries=MappingProxyType({}),
        removed_entries=MappingProxyType({}),
        bound=frozenset(),
        unbound=frozenset(),
        iptables=False,
    )


def changed(before: DesiredState, *keys: VirtualServerKey) -> DesiredChange:
    """The change that made the virtual servers at ``keys`` what they are, from ``before``."""
    return replace(
        nothing_changed(),
        virtual_servers=MappingProxyType({key: before.virtual_servers.get(key) for key in keys}),
    )


def test_a_refused_scheduler_holds_its_virtual_server_alone_and_is_tried_once() -> None:
    run = proxy()
    state = with_sed(desired({TCP_VS: [POD_A], SED_VS: [POD_A, POD_B]}))

    first = run.sync(state)

    assert TCP_VS in run.table() and SED_VS not in run.table()
    # Nothing failed: the virtual server was never sent, its scheduler was tried instead.
    assert first.ok and not first.needs_full
    assert run.trials.tried == ["sed"]
    assert {type(op) for op in first.quarantined} == {AddVirtualServer, AddRealServer}
    assert [(t.object, t.change, t.entry.reason) for t in first.transitions] == [
        (Scheduler("sed"), Change.QUARANTINED, "scheduler_unavailable"),
        (SED_VS, Change.QUARANTINED, "scheduler_unavailable"),
    ]
    assert run.reconciler.next_retry == run.clock.now + 10.0
    # Before the retry is due, neither the scheduler nor the virtual server is tried again,
    # in a full sync or an incremental one that touches it.
    run.later(5.0)
    again = run.sync(state)
    touched = run.change(state, changed(state, SED_VS))
    assert again.ok and again.writes == 0 and again.transitions == ()
    assert touched.ok and touched.writes == 0 and not touched.needs_full
    assert run.trials.tried == ["sed"]
    assert run.held.entries()[SED_VS].attempts == 1


def test_a_due_retry_tries_the_scheduler_once_for_all_its_virtual_servers() -> None:
    run = proxy()
    other = VirtualServerKey(TCP_VS.protocol, ip("10.96.0.31"), 80)
    state = with_sed(desired({TCP_VS: [POD_A], SED_VS: [POD_A], other: [POD_B]}), SED_VS, other)
    run.sync(state)
    assert run.reconciler.next_retry == run.clock.now + 10.0

    run.later(10.0)
    retried = run.change(state)

    assert run.trials.tried == ["sed", "sed"]
    assert not retried.needs_full and retried.transitions == ()
    assert {run.held.entries()[key].attempts for key in (SED_VS, other)} == {2}
    assert run.reconciler.next_retry == run.clock.now + 20.0
    run.later(20.0)
    run.change(state)
    run.later(40.0)
    run.change(state)
    # Capped.
    assert run.reconciler.next_retry == run.clock.now + 40.0


def test_a_scheduler_whose_module_becomes_loadable_is_taken_at_its_retry() -> None:
    run = proxy()
    state = with_sed(desired({TCP_VS: [POD_A], SED_VS: [POD_A, POD_B]}))
    run.sync(state)
    assert isinstance(run.fake.ipvs, FakeIPVS)
    run.fake.ipvs.schedulers |= {"sed"}
    run.later(10.0)

    retried = run.change(state)

    assert retried.ok and not retried.needs_full
    assert run.table()[SED_VS].server.scheduler == "sed"
    assert set(run.table()[SED_VS].real_servers) == {POD_A.key, POD_B.key}
    assert {(t.object, t.change, t.applied) for t in retried.transitions} == {
        (Scheduler("sed"), Change.RELEASED, True),
        (SED_VS, Change.RELEASED, True),
    }
    assert len(run.held) == 0 and run.reconciler.next_retry is None


def test_a_changed_wish_is_tried_at_once() -> None:
    run = proxy()
    before = with_sed(desired({TCP_VS: [POD_A], SED_VS: [POD_A]}))
    run.sync(before)
    fixed = desired({TCP_VS: [POD_A], SED_VS: [POD_A]})

    applied = run.change(fixed, changed(before, SED_VS))

    assert applied.ok and run.table()[SED_VS].server.scheduler == "rr"
    assert [(t.object, t.change) for t in applied.transitions] == [
        (SED_VS, Change.RELEASED),
        (Scheduler("sed"), Change.RELEASED),
    ]


def test_a_quarantined_virtual_server_no_longer_wanted_is_released_and_nothing_deleted() -> None:
    run = proxy()
    before = with_sed(desired({TCP_VS: [POD_A], SED_VS: [POD_A]}))
    run.sync(before)
    after = desired({TCP_VS: [POD_A]})
    change = replace(changed(before, SED_VS), unbound=frozenset({SED_VS.address}))

    removed = run.change(after, change)

    assert removed.ok and not removed.needs_full
    assert not any(isinstance(op, DeleteVirtualServer) for op in removed.applied)
    assert {(t.object, t.applied) for t in removed.transitions} == {
        (SED_VS, False),
        (Scheduler("sed"), False),
    }
    assert len(run.held) == 0


def test_a_real_server_the_kernel_refuses_waits_and_the_rest_of_its_change_does_not() -> None:
    fake = FakeKernel()
    refusing = RefusingIPVS(fake.ipvs, {AddRealServer(TCP_VS, POD_B)}, error(errno.EINVAL))
    fake.ipvs = refusing  # type: ignore[assignment]
    run = proxy(fake)
    state = desired({TCP_VS: [POD_A, POD_B], UDP_VS: [POD_A]})

    first = run.sync(state)

    assert not first.ok and not first.needs_full
    assert [(t.object, t.entry.reason) for t in first.transitions] == [
        (RealServerRef(TCP_VS, POD_B.key), "EINVAL")
    ]
    assert set(run.table()[TCP_VS].real_servers) == {POD_A.key}
    # An incremental sync that touches the virtual server reads it, so does not trip over
    # the real server it lacks, and leaves that real server alone until its retry.
    grown = desired({TCP_VS: [POD_A, POD_B, POD_C], UDP_VS: [POD_A]})
    touched = run.change(grown, changed(state, TCP_VS))
    assert touched.ok and not touched.needs_full
    assert set(run.table()[TCP_VS].real_servers) == {POD_A.key, POD_C.key}
    refusing.refuse.clear()
    run.later(10.0)
    retried = run.change(grown)
    assert retried.applied == (AddRealServer(TCP_VS, POD_B),)
    assert [(t.change, t.applied) for t in retried.transitions] == [(Change.RELEASED, True)]


def test_a_transient_error_or_a_kernel_out_of_step_still_asks_for_a_full_sync() -> None:
    fake = FakeKernel()
    refusing = RefusingIPVS(fake.ipvs, {AddRealServer(TCP_VS, POD_B)}, error(errno.ENOMEM))
    fake.ipvs = refusing  # type: ignore[assignment]
    run = proxy(fake)
    transient = run.sync(desired({TCP_VS: [POD_A, POD_B]}))
    assert transient.needs_full and len(run.held) == 0
    refusing.error = error(errno.EEXIST)
    out_of_step = run.sync(desired({TCP_VS: [POD_A, POD_B]}))
    assert out_of_step.needs_full and len(run.held) == 0


def test_an_ipset_entry_the_kernel_refuses_waits_and_goes_without_a_delete() -> None:
    run = proxy()
    spec = IPSetSpec("KUBE-CLUSTER-IP", "hash:ip,port")
    good = {"10.96.0.10,tcp:80"}

    def sets(*entries: str) -> dict[str, IPSetContent]:
        return {spec.name: IPSetContent(spec, frozenset(entries))}

    state = desired({}, ipsets=sets(*good, "not-an-entry"))
    first = run.sync(state)
    assert not first.needs_full
    assert [t.object for t in first.transitions] == [IPSetMember(spec.name, "not-an-entry")]
    assert run.fake.ipsets.list_sets()[spec.name].entries == good
    # Due: an incremental sync adds it again (and the kernel refuses it again).
    run.later(10.0)
    retried = run.change(state)
    assert [f.op for f in retried.failures] == [AddIPSetEntries(spec.name, ("not-an-entry",))]
    assert not retried.needs_full and run.held.entries()[first.transitions[0].object].attempts == 2
    # Removed: no delete is sent for what the kernel never had.
    gone = replace(
        nothing_changed(),
        removed_entries=MappingProxyType({spec.name: frozenset({"not-an-entry"})}),
    )
    removed = run.change(desired({}, ipsets=sets(*good)), gone)
    assert not any(isinstance(op, DeleteIPSetEntries) for op in removed.plan.ipsets)
    assert removed.ok and len(run.held) == 0


def test_a_kernel_parameter_the_kernel_refuses_waits_for_a_full_sync_once_due() -> None:
    run = proxy()
    del run.fake.sysctl.values["net.ipv4.vs.conntrack"]
    first = run.sync(desired({TCP_VS: [POD_A]}))
    assert not first.needs_full
    assert [(t.object, t.entry.reason) for t in first.transitions] == [
        (Parameter("net.ipv4.vs.conntrack"), "ENOENT")
    ]
    # Incremental syncs never plan parameters, so they ask for no retry.
    assert run.reconciler.next_retry is None
    run.later(5.0)
    assert run.sync(desired({TCP_VS: [POD_A]})).writes == 0
    run.later(5.0)
    run.fake.sysctl.values["net.ipv4.vs.conntrack"] = "0"
    retried = run.sync(desired({TCP_VS: [POD_A]}))
    assert [op for op in retried.applied if isinstance(op, SetSysctl)] == [
        SetSysctl("net.ipv4.vs.conntrack", "1", "0")
    ]
    assert len(run.held) == 0


def test_a_retry_in_a_full_sync_is_no_drift() -> None:
    run = proxy()
    state = with_sed(desired({TCP_VS: [POD_A], SED_VS: [POD_A]}))
    run.sync(state)
    assert isinstance(run.fake.ipvs, FakeIPVS)
    run.fake.ipvs.schedulers |= {"sed"}
    run.later(10.0)
    full = run.sync(state)
    assert SED_VS in run.table() and full.drift == {}


def test_what_a_sync_finds_in_the_kernel_as_wanted_leaves_quarantine() -> None:
    run = proxy()
    state = with_sed(desired({TCP_VS: [POD_A], SED_VS: [POD_A]}))
    run.sync(state)
    assert isinstance(run.fake.ipvs, FakeIPVS)
    # Someone else loads the module and writes the virtual server as we want it.
    run.fake.ipvs.schedulers |= {"sed"}
    run.fake.ipvs.apply(
        [AddVirtualServer(VirtualServer(SED_VS, "sed")), AddRealServer(SED_VS, POD_A)]
    )
    run.later(10.0)
    found = run.change(state)
    assert found.writes == 0 and SED_VS not in run.held
    assert run.reconciler.next_retry is None
