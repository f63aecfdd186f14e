"""A periodic full sync that makes the syncs due while it reads the real kernel's IPVS table
one virtual server at a time: neither undoes the other."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from ipvsproxy.daemon.sources import Reading
from ipvsproxy.daemon.syncer import Interleave, Syncer, SyncMode, SyncReport
from ipvsproxy.kernel.protocols import IPVSKernel, Kernel
from ipvsproxy.model import IPVSTable, VirtualServerState
from ipvsproxy.reconcile.reconciler import Reconciler
from ipvsproxy.translate import Settings
from tests.daemon_kit import cluster, endpoint_slice, service
from tests.kernel.test_reconciler_lab import kernel
from tests.unit.test_daemon_syncer import Clock, replaced, snapshot
from tests.unit.test_full_sync_interleave import BEFORE_IPVS, vip

__all__ = ["kernel"]


def programmed(table: IPVSTable) -> dict[object, frozenset[object]]:
    return {key: frozenset(state.real_servers) for key, state in table.items()}


class _Listing:
    """The real IPVS, telling when its table's listing began."""

    def __init__(self, ipvs: IPVSKernel) -> None:
        self._ipvs = ipvs
        self.began = False

    def listed(self) -> Iterator[VirtualServerState]:
        self.began = True
        return self._ipvs.listed()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ipvs, name)


def test_changes_made_inside_a_full_sync_of_the_real_kernel_stay_and_nothing_is_left(
    kernel: Kernel,
) -> None:
    clock = Clock()
    ipvs = _Listing(kernel.ipvs)
    watched = replace(kernel, ipvs=ipvs)
    syncer = Syncer(watched, Settings(), 30.0, Reconciler(watched, clock=clock), clock=clock)
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
    # The first while the kernel's other parts are read (its third call), the second while
    # IPVS is (its thirteenth since the listing began, before the last virtual server).
    calls: dict[bool, int] = {False: 0, True: 0}
    made: list[SyncReport] = []

    def due() -> Reading | None:
        phase = ipvs.began
        calls[phase] += 1
        objects_now = {(False, 3): first, (True, 13): then}.get((phase, calls[phase]))
        return None if objects_now is None else Reading(snapshot(objects_now), [])

    full = syncer.sync(snapshot(own), [], interleave=Interleave(due, made.append))

    # Thirteen virtual servers: due is asked before each read and once after the last.
    assert calls[True] == 14
    assert calls[False] >= BEFORE_IPVS
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
