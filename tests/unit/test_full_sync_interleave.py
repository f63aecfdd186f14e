"""A periodic full sync makes the syncs that come due while it reads the kernel (fake kernel)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from ipaddress import ip_address
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ipvsproxy.daemon.daemon import Daemon, DaemonOptions
from ipvsproxy.daemon.sources import Reading
from ipvsproxy.daemon.syncer import Interleave, Syncer, SyncMode, SyncReport
from ipvsproxy.kernel.protocols import as_listed
from ipvsproxy.model import (
    AddIPSetEntries,
    AddRealServer,
    AddVirtualServer,
    BindAddress,
    CreateIPSet,
    DeleteIPSetEntries,
    DeleteRealServer,
    DeleteVirtualServer,
    IPSetContent,
    IPSetSpec,
    IPVSOp,
    IPVSTable,
    RealServer,
    RealServerKey,
    TransportProtocol,
    UnbindAddress,
    UpdateVirtualServer,
    VirtualServer,
    VirtualServerKey,
    VirtualServerState,
)
from ipvsproxy.reconcile.state import KernelState, replayed
from ipvsproxy.translate import Settings
from tests.daemon_kit import (
    RecordingIPVS,
    RecordingKernel,
    cluster,
    endpoint_slice,
    service,
)
from tests.unit.test_daemon_syncer import Clock, make, replaced, snapshot
from tests.unit.test_daemon_workers import BreakableSource

Objects = list[dict[str, Any]]


def vip(index: int) -> VirtualServerKey:
    return VirtualServerKey(TransportProtocol.TCP, ip_address(f"10.96.0.{index + 1}"), 80)


# Calls of ``due`` before the IPVS table is listed, at the least: one before each family's
# iptables-save is started (IPv4 and IPv6), one before each of the kernel's other reads, and
# one before each address and each part of the ipsets decoded (with six services: the node's
# address and one a service, and 34 sets, each one part in the fake).
BEFORE_IPVS = 40


class Due:
    """Readings that come due at given calls of ``due``, and the syncs made of them: call 0
    is the one before the first virtual server is read, and those before it are negative,
    -BEFORE_IPVS the first of the full sync (the later ones before the listing come due
    nothing)."""

    def __init__(self, fake: RecordingKernel, at: dict[int, Objects]) -> None:
        self._fake = fake
        self._at = at
        self._listings = fake.recording.dumps
        self.calls = 0
        # Calls since the IPVS table was listed.
        self.calls_in_listing = 0
        self.reports: list[SyncReport] = []
        # How many virtual servers the full sync had read when each reading was taken.
        self.taken_after_reads: list[int] = []
        self.done_after_reads: list[int] = []

    def due(self) -> Reading | None:
        if self._fake.recording.dumps == self._listings:
            call: int | None = self.calls - BEFORE_IPVS if self.calls < BEFORE_IPVS else None
        else:
            call = self.calls_in_listing
            self.calls_in_listing += 1
        self.calls += 1
        objects = self._at.get(call) if call is not None else None
        if objects is None:
            return None
        self.taken_after_reads.append(len(self._fake.recording.reads))
        return Reading(snapshot(objects), [])

    def done(self, report: SyncReport) -> None:
        self.reports.append(report)
        self.done_after_reads.append(len(self._fake.recording.reads))

    def interleave(self) -> Interleave:
        return Interleave(due=self.due, done=self.done)


def started(services: int) -> tuple[Clock, RecordingKernel, Syncer, Objects]:
    clock = Clock()
    fake, syncer = make(clock)
    objects = cluster(services)
    assert syncer.sync(snapshot(objects), []).result.ok
    fake.take_ops()
    fake.recording.reads = []
    clock.now = 30.0
    return clock, fake, syncer, objects


def settled(fake: RecordingKernel, objects: Objects) -> IPVSTable:
    """What a fresh proxy would program for ``objects`` into an empty kernel."""
    clock = Clock()
    fresh, syncer = make(clock)
    assert syncer.sync(snapshot(objects), []).result.ok
    return fresh.recording.fake.dump()


def test_a_change_due_during_the_read_is_made_then_not_after_the_whole_table() -> None:
    _, fake, syncer, objects = started(10)
    changed = replaced(objects, endpoint_slice(7, endpoints=2, first=1))
    due = Due(fake, {2: changed})

    full = syncer.sync(snapshot(objects), [], interleave=due.interleave())

    assert full.mode is SyncMode.FULL and full.result.ok
    (made,) = due.reports
    assert made.mode is SyncMode.INCREMENTAL and made.result.ok
    # Taken two virtual servers into the read of ten, its ops went to the kernel at once.
    assert due.taken_after_reads == [2]
    # Made before the third was read (it read virtual server 8 itself, losing a real server).
    assert due.done_after_reads == [3]
    old, new = (RealServerKey(ip_address(f"10.128.7.{n}"), 8080) for n in (1, 3))
    assert fake.take_ops()[:2] == [
        AddRealServer(vip(7), RealServer(new)),
        DeleteRealServer(vip(7), old),
    ]
    # The full sync planned against the kernel as the change left it: nothing more to do.
    assert full.result.writes == 0 and not full.result.drift
    assert fake.recording.fake.dump() == settled(fake, changed)
    assert full.snapshot.endpoint_slices == snapshot(changed).endpoint_slices


def test_a_service_the_change_adds_or_deletes_is_not_undone_by_the_full_sync() -> None:
    _, fake, syncer, objects = started(6)
    gone = [o for o in objects if o["metadata"]["name"] not in ("svc-5", "svc-5-abcde")]
    # Deleted after the read has passed it, added before the read would reach it.
    changed = [*gone, service(40), endpoint_slice(40)]
    # Taken at the last call, once every virtual server has been read.
    due = Due(fake, {6: changed})

    full = syncer.sync(snapshot(objects), [], interleave=due.interleave())

    assert [r.mode for r in due.reports] == [SyncMode.INCREMENTAL]
    ops: list[IPVSOp] = [*due.reports[0].result.applied]  # type: ignore[list-item]
    assert DeleteVirtualServer(vip(5)) in ops
    assert any(isinstance(op, AddVirtualServer) and op.server.key == vip(40) for op in ops)
    assert full.result.writes == 0
    table = fake.recording.fake.dump()
    assert vip(5) not in table and vip(40) in table
    assert table == settled(fake, changed)


def test_changes_keep_coming_and_the_full_sync_still_ends_with_all_of_them() -> None:
    _, fake, syncer, objects = started(8)
    steps: dict[int, Objects] = {}
    current = objects
    for call in (0, 3, 4, 8):
        current = replaced(current, endpoint_slice(call % 8, endpoints=3, first=call))
        steps[call] = current
    due = Due(fake, steps)

    full = syncer.sync(snapshot(objects), [], interleave=due.interleave())

    assert len(due.reports) == 4 and all(r.result.ok for r in due.reports)
    assert full.result.ok and full.result.writes == 0
    assert fake.recording.fake.dump() == settled(fake, current)


def test_no_sync_is_made_inside_a_first_or_a_repairing_full_sync() -> None:
    clock = Clock()
    fake, syncer = make(clock)
    objects = cluster(4)
    due = Due(fake, {})
    assert syncer.sync(snapshot(objects), [], interleave=due.interleave()).result.ok
    # The first: the kernel holds nothing believed yet.
    assert due.calls == 0
    # After a failed op the kernel is in doubt: a full sync, alone.
    fake.recording.fake.apply([DeleteVirtualServer(vip(0))])
    clock.now = 1.0
    failed = syncer.sync(snapshot(replaced(objects, endpoint_slice(0, endpoints=3))), [])
    assert not failed.result.ok
    clock.now = 2.0
    repair = syncer.sync(
        snapshot(replaced(objects, endpoint_slice(0, endpoints=3))),
        [],
        interleave=due.interleave(),
    )
    assert repair.mode is SyncMode.FULL and repair.result.ok and due.calls == 0


def test_a_node_change_due_during_the_read_waits_for_the_full_sync_that_makes_it() -> None:
    _, fake, syncer, objects = started(4)
    before = snapshot(objects)
    assert before.node is not None
    zone_b = replace(before.node, labels={"topology.kubernetes.io/zone": "b"})
    later = replaced(objects, endpoint_slice(1, endpoints=3))
    calls: list[int] = []

    def due() -> Reading | None:
        calls.append(len(calls))
        if len(calls) == 2:
            return Reading(replace(snapshot(later), node=zone_b), [])
        return None

    made: list[SyncReport] = []
    full = syncer.sync(before, [], interleave=Interleave(due=due, done=made.append))

    # Not made inside: the full sync made it, and asked for no more while it read.
    assert made == [] and len(calls) == 2
    assert full.result.ok and full.changes.node
    assert full.snapshot.node == zone_b
    assert len(fake.recording.fake.dump()[vip(1)].real_servers) == 3


def test_what_differs_from_the_cluster_when_read_is_repaired_around_the_changes_inside() -> None:
    """Virtual servers are compared as they are read: one changed behind our back is still
    repaired, and one a change inside wrote is compared with the change's translation."""
    _, fake, syncer, objects = started(6)
    held = fake.recording.fake.dump()
    lost = next(iter(held[vip(2)].real_servers))
    fake.recording.fake.apply(
        [
            DeleteRealServer(vip(2), lost),
            UpdateVirtualServer(replace(held[vip(4)].server, scheduler="lc")),
        ]
    )
    # Taken once virtual servers 0-4 are read: 4 is written again after its read.
    later = replaced(objects, endpoint_slice(4, endpoints=3, first=5))
    due = Due(fake, {5: later})

    full = syncer.sync(snapshot(objects), [], interleave=due.interleave())

    # The change read virtual server 4 (it loses endpoints) and wrote it whole.
    (made,) = due.reports
    assert made.result.ok
    assert UpdateVirtualServer(held[vip(4)].server) in made.result.applied
    assert full.result.ok and dict(full.result.drift) == {"real_server": 1}
    assert fake.recording.fake.dump() == settled(fake, later)


Change = tuple[int, int, bool]
CHANGE = st.tuples(st.integers(0, 7), st.integers(0, 3), st.booleans())


def changed(objects: Objects, change: Change, first: int) -> Objects:
    """``objects`` with service ``index`` deleted, or made anew with ``endpoints``."""
    index, endpoints, deleted = change
    names = (f"svc-{index}", f"svc-{index}-abcde")
    kept = [o for o in objects if o["metadata"]["name"] not in names]
    return kept if deleted else [*kept, service(index), endpoint_slice(index, endpoints, first)]


@settings(max_examples=60, deadline=None)
@given(st.none() | CHANGE, st.dictionaries(st.integers(-BEFORE_IPVS, 8), CHANGE, max_size=6))
def test_whatever_comes_due_where_the_kernel_ends_as_a_fresh_proxy_would_program_it(
    own: Change | None, inside: dict[int, Change]
) -> None:
    """Five to seven virtual servers: a change at call 8 is never taken, and waits for the
    next sync; those at negative calls come while the kernel's other parts are read (see
    ``Due``). ``own``: the full sync's own change."""
    _, fake, syncer, objects = started(6)
    current = objects if own is None else changed(objects, own, first=40)
    given_to_full = current
    steps: dict[int, Objects] = {}
    for call, change in sorted(inside.items()):
        current = steps[call] = changed(current, change, first=call + BEFORE_IPVS)
    due = Due(fake, steps)

    full = syncer.sync(snapshot(given_to_full), [], interleave=due.interleave())

    # Asked before each of the other reads, each virtual server listed, and once after.
    before_listing = [steps[call] for call in sorted(steps) if call < 0]
    listed = settled(fake, before_listing[-1] if before_listing else given_to_full)
    assert due.calls_in_listing == len(listed) + 1
    assert due.calls - due.calls_in_listing >= BEFORE_IPVS
    taken = [steps[call] for call in sorted(steps) if call < due.calls_in_listing]
    assert all(r.result.ok for r in due.reports), [r.result.failures for r in due.reports]
    assert full.result.ok and full.result.writes == 0 and not full.result.drift
    assert fake.recording.fake.dump() == settled(fake, taken[-1] if taken else given_to_full)


class ListingIPVS(RecordingIPVS):
    """Calls ``on_read`` with the count of virtual servers read since the table was last
    listed (as a full sync that lets changes through reads it)."""

    def __init__(self) -> None:
        super().__init__()
        self.listings = 0
        self.read_since_listing = 0
        self.on_read: Callable[[int], None] = lambda _: None

    def listed(self) -> Iterator[VirtualServerState]:
        self.listings += 1
        self.read_since_listing = 0
        return super().listed()

    def with_real_servers(
        self, listed: VirtualServerState, *, traffic: bool = True
    ) -> VirtualServerState | None:
        self.read_since_listing += 1
        if self.listings:
            self.on_read(self.read_since_listing)
        return super().with_real_servers(listed, traffic=traffic)


class DaemonReading:
    """A daemon over ``ListingIPVS``, syncing fully every 0.3 s, its source 20 services."""

    def __init__(self) -> None:
        self.fake = RecordingKernel()
        self.fake.recording = self.ipvs = ListingIPVS()
        options = DaemonOptions(
            sync_period=0.3, min_sync_period=0.0, healthz=None, metrics=None, tick=0.05
        )
        self.daemon = Daemon(self.fake.kernel(), Settings(), options)
        self.source = BreakableSource(cluster(20))

    def add_service(self, index: int) -> None:
        self.source.objects = [*self.source.objects, service(index), endpoint_slice(index)]
        self.daemon.changed("services")

    def serves(self, index: int) -> bool:
        return vip(index) in self.fake.recording.fake.dump()

    def run_until(self, on_read: Callable[[int], None], done: Callable[[], bool]) -> None:
        """Run, ``on_read`` set once synced, until ``done`` (at most 20 s)."""
        stop = threading.Event()
        thread = threading.Thread(target=self.daemon.run, args=(self.source, stop))
        thread.start()
        try:
            assert self.daemon.synced.wait(20)
            self.ipvs.on_read = on_read
            deadline = time.monotonic() + 20
            while not done() and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            stop.set()
            thread.join(20)
        assert not thread.is_alive()


def test_the_daemon_makes_a_change_inside_the_periodic_full_sync_reading_the_kernel() -> None:
    running = DaemonReading()
    seen: dict[str, bool] = {}

    def on_read(count: int) -> None:
        if count == 3 and "changed" not in seen:
            seen["changed"] = True
            running.add_service(50)
        elif count == 15 and "changed" in seen and "served" not in seen:
            seen["served"] = running.serves(50)

    running.run_until(on_read, lambda: "served" in seen)
    # Served twelve virtual servers later, while the full sync still read the other eight.
    assert seen == {"changed": True, "served": True}


def test_a_change_whose_reading_fails_inside_the_full_sync_is_made_after_it() -> None:
    running = DaemonReading()

    def on_read(count: int) -> None:
        if count == 3:
            running.ipvs.on_read = lambda _: None
            running.source.failures_left = 1
            running.add_service(50)

    running.run_until(on_read, lambda: running.serves(50))
    assert running.source.failures_left == 0
    assert running.serves(50)
    errors = running.daemon.metrics.registry.get_sample_value(
        "ipvsproxy_syncs_total", {"mode": "unknown", "result": "error"}
    )
    assert errors == 1


def test_a_change_inside_builds_on_the_full_syncs_own_changes_as_the_kernel_has_them() -> None:
    """The full sync's own changes (a Service with no endpoints yet) are in the kernel before
    a change made inside it builds on them (its endpoints): the one inside plans against
    what the kernel holds, not against a translation not yet written."""
    _, fake, syncer, objects = started(6)
    own = [*objects, service(40)]
    inside = [*own, endpoint_slice(40, endpoints=3)]
    due = Due(fake, {2: inside})

    full = syncer.sync(snapshot(own), [], interleave=due.interleave())

    assert [r.mode for r in due.reports] == [SyncMode.INCREMENTAL] * 2
    assert all(r.result.ok for r in due.reports), [r.result.failures for r in due.reports]
    assert full.result.ok and full.result.writes == 0 and not full.result.drift
    assert len(fake.recording.fake.dump()[vip(40)].real_servers) == 3
    assert fake.recording.fake.dump() == settled(fake, inside)


def test_ops_applied_after_a_read_are_replayed_onto_it_in_their_order() -> None:
    spec = IPSetSpec("KUBE-CLUSTER-IP", "hash:ip,port")
    other = IPSetSpec("KUBE-NODE-PORT-TCP", "bitmap:port", comment="not kept by the kernel")
    a, b = ip_address("10.96.0.1"), ip_address("10.96.0.2")
    read = KernelState(
        bound_addresses=frozenset({a}),
        local_addresses=frozenset({a}),
        ipsets={spec.name: IPSetContent(spec, frozenset({"10.96.0.1,tcp:80"}))},
    )
    later = replayed(
        read,
        [
            # Seen by the read already: replayed, it changes nothing.
            AddIPSetEntries(spec.name, ("10.96.0.1,tcp:80",)),
            AddIPSetEntries(spec.name, ("10.96.0.2,tcp:80",)),
            DeleteIPSetEntries(spec.name, ("10.96.0.1,tcp:80",)),
            CreateIPSet(spec),
            CreateIPSet(other),
            AddIPSetEntries(other.name, ("30080",)),
            BindAddress(b),
            UnbindAddress(a),
            AddVirtualServer(VirtualServer(vip(0))),
        ],
    )
    assert later.ipsets == {
        spec.name: IPSetContent(spec, frozenset({"10.96.0.2,tcp:80"})),
        other.name: IPSetContent(as_listed(other), frozenset({"30080"})),
    }
    assert later.bound_addresses == later.local_addresses == {b}
    assert later.ipvs == read.ipvs
