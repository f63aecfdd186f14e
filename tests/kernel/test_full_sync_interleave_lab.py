"""A periodic full sync that makes the syncs due while it reads the real kernel's IPVS table
one virtual server at a time: neither undoes the other."""

from __future__ import annotations

from ipvsproxy.daemon.sources import Reading
from ipvsproxy.daemon.syncer import Interleave, Syncer, SyncMode, SyncReport
from ipvsproxy.kernel.protocols import Kernel
from ipvsproxy.model import IPVSTable
from ipvsproxy.reconcile.reconciler import Reconciler
from ipvsproxy.translate import Settings
from tests.daemon_kit import cluster, endpoint_slice, service
from tests.kernel.test_reconciler_lab import kernel
from tests.unit.test_daemon_syncer import Clock, replaced, snapshot
from tests.unit.test_full_sync_interleave import BEFORE_IPVS, vip

__all__ = ["kernel"]


def programmed(table: IPVSTable) -> dict[object, frozenset[object]]:
    return {key: frozenset(state.real_servers) for key, state in table.items()}


def test_changes_made_inside_a_full_sync_of_the_real_kernel_stay_and_nothing_is_left(
    kernel: Kernel,
) -> None:
    clock = Clock()
    syncer = Syncer(kernel, Settings(), 30.0, Reconciler(kernel, clock=clock), clock=clock)
    objects = cluster(12)
    assert syncer.sync(snapshot(objects), []).result.ok
    clock.now = 30.0
    gone = ("svc-5", "svc-5-abcde")
    # The full sync's own change: a Service whose endpoints come while it reads.
    own = [*objects, service(41)]
    first = replaced(own, endpoint_slice(7, endpoints=3, first=1), endpoint_slice(41))
    kept = [o for o in own if o["metadata"]["name"] not in gone]
    then = replaced(
        kept,
        endpoint_slice(7, endpoints=3, first=1),
        endpoint_slice(41),
        service(40),
        endpoint_slice(40),
    )
    # The first while the kernel's other parts are read, the second while IPVS is.
    readings = {2: first, BEFORE_IPVS + 12: then}
    calls: list[int] = []
    made: list[SyncReport] = []

    def due() -> Reading | None:
        calls.append(len(calls))
        objects_now = readings.get(len(calls) - 1)
        return None if objects_now is None else Reading(snapshot(objects_now), [])

    full = syncer.sync(snapshot(own), [], interleave=Interleave(due, made.append))

    # Thirteen virtual servers: due is asked before each read and once after the last.
    assert len(calls) == BEFORE_IPVS + 14
    # The full sync's own change first, then the two made while it read.
    assert [(r.mode, r.result.ok) for r in made] == [(SyncMode.INCREMENTAL, True)] * 3
    assert all(r.result.writes > 0 for r in made)
    assert full.mode is SyncMode.FULL and full.result.ok
    assert full.result.writes == 0 and not full.result.drift
    table = kernel.ipvs.dump()
    assert vip(5) not in table and vip(40) in table
    assert len(table[vip(7)].real_servers) == 3
    assert len(table[vip(41)].real_servers) == 2
    # As a fresh full sync of the newest cluster would leave it: it finds nothing to do.
    clock.now = 60.0
    again = syncer.sync(snapshot(then), [])
    assert again.mode is SyncMode.FULL and again.result.writes == 0
    assert programmed(kernel.ipvs.dump()) == programmed(table)
