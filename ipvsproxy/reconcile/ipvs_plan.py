"""The pure diff: desired IPVS state against the kernel's, as a minimal set of typed ops."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ipvsproxy.model import (
    AddRealServer,
    AddVirtualServer,
    DeleteVirtualServer,
    DesiredState,
    DesiredVirtualServer,
    FlushConntrack,
    IPAddress,
    IPVSOp,
    IPVSTable,
    RealServerKey,
    RealServerRef,
    UpdateRealServer,
    UpdateVirtualServer,
    VirtualServerKey,
    VirtualServerState,
)
from ipvsproxy.persistent import frozen
from ipvsproxy.reconcile.graceful import (
    DEFAULT_GRACE_PERIOD,
    DRAINED_PROTOCOLS,
    Drain,
    remove_real_server,
)

NO_DRAINS: Mapping[RealServerRef, float] = MappingProxyType({})
NOTHING_MATCHED: Mapping[VirtualServerKey, DesiredVirtualServer] = MappingProxyType({})


def owned_addresses(
    desired: DesiredState,
    bound_now: Iterable[IPAddress],
    node_addresses_before: frozenset[IPAddress] = frozenset(),
) -> frozenset[IPAddress]:
    """Addresses whose virtual servers are ours: kube-ipvs0's, now or to be, node ports', and
    the node's own addresses that carried ours before (an external IP that is the node's
    address, since dropped: nothing else says its virtual server was ours)."""
    return frozen(desired.bound_addresses).union(
        frozen(desired.node_addresses),
        desired.node_port_addresses,
        node_addresses_before,
        bound_now,
    )


def excluded(address: IPAddress, desired: DesiredState) -> bool:
    return any(address in cidr for cidr in desired.exclude_cidrs)


@dataclass(frozen=True, slots=True)
class IPVSPlan:
    """IPVS ops in three stages, applied in this order."""

    # Virtual servers added or updated, real servers added, weights restored.
    changes: tuple[IPVSOp, ...] = ()
    # Real servers drained (weight 0) or deleted, on virtual servers that stay.
    removals: tuple[IPVSOp, ...] = ()
    # Whole virtual servers that are ours and no longer desired.
    stale: tuple[DeleteVirtualServer, ...] = ()
    flushes: tuple[FlushConntrack, ...] = ()
    draining: tuple[Drain, ...] = ()

    @property
    def ops(self) -> tuple[IPVSOp, ...]:
        return (*self.changes, *self.removals, *self.stale)


def in_sync(wanted: DesiredVirtualServer, current: VirtualServerState) -> bool:
    """Whether ``plan_ipvs`` has nothing to do for this virtual server."""
    if current.server != wanted.server:
        return False
    current_reals, wanted_reals = current.real_servers, wanted.real_servers
    if len(current_reals) != len(wanted_reals):
        return False
    # As many keys on each side, each wanted one found: the same keys, each looked up once.
    for real, want in wanted_reals.items():
        have = current_reals.get(real)
        if have is None or not have.server.same_settings(want):
            return False
    return True


def _by_key(keys: Iterable[RealServerKey]) -> list[RealServerKey]:
    return sorted(keys, key=RealServerKey.sort_key)


def plan_ipvs(
    desired: DesiredState,
    actual: IPVSTable,
    owned: frozenset[IPAddress],
    *,
    claimed: Collection[VirtualServerKey] = frozenset(),
    drains: Mapping[RealServerRef, float] = NO_DRAINS,
    now: float = 0.0,
    grace_period: float = DEFAULT_GRACE_PERIOD,
    as_desired: Mapping[VirtualServerKey, DesiredVirtualServer] = NOTHING_MATCHED,
) -> IPVSPlan:
    """Ops that turn ``actual`` into ``desired``; virtual servers that are neither on an
    ``owned`` address nor ``claimed`` (by the kernel's own records, see ``ownership``) are
    left alone.

    ``drains`` maps each real server this process started draining to when it started; a
    weight-0 real server that is not desired and not in it (a restart) starts draining now.

    ``as_desired``: virtual servers found ``in_sync`` with these desired values when read
    (see ``state.read_ipvs_between``, whose table keeps no real servers for them): one whose
    desired value is still the same object is not compared again.
    """
    changes: list[IPVSOp] = []
    removals: list[IPVSOp] = []
    flushes: list[FlushConntrack] = []
    draining: list[Drain] = []
    wanted_servers = desired.virtual_servers
    # Most of a big table is as desired: those are told apart first, and only the others
    # sorted and planned.
    differing_keys = [
        key
        for key, wanted in wanted_servers.items()
        if (current := actual.get(key)) is None
        or (as_desired.get(key) is not wanted and not in_sync(wanted, current))
    ]
    for key in sorted(differing_keys, key=VirtualServerKey.sort_key):
        wanted = wanted_servers[key]
        current = actual.get(key)
        if current is None:
            changes.append(AddVirtualServer(wanted.server))
            changes.extend(
                AddRealServer(key, wanted.real_servers[r]) for r in _by_key(wanted.real_servers)
            )
            continue
        if current.server != wanted.server:
            changes.append(UpdateVirtualServer(wanted.server))
        wanted_reals, current_reals = wanted.real_servers, current.real_servers
        differing = (
            real
            for real, want in wanted_reals.items()
            if (have := current_reals.get(real)) is None or have.server != want
        )
        for real in _by_key(differing):
            want = wanted_reals[real]
            have = current_reals.get(real)
            changes.append(
                AddRealServer(key, want) if have is None else UpdateRealServer(key, want)
            )
        for real in _by_key(r for r in current_reals if r not in wanted_reals):
            ref = RealServerRef(key, real)
            removal = remove_real_server(
                ref, current_reals[real], drains.get(ref), now, grace_period
            )
            removals.extend(removal.ops)
            flushes.extend(removal.flushes)
            if removal.drain is not None:
                draining.append(removal.drain)
    stale = sorted(
        (
            key
            for key in actual
            if key not in wanted_servers
            and (key.address in owned or key in claimed)
            and not excluded(key.address, desired)
        ),
        key=VirtualServerKey.sort_key,
    )
    # kube-proxy deletes a stale virtual server outright; its UDP/SCTP flows still need forgetting.
    flushes.extend(
        FlushConntrack(key, real)
        for key in stale
        if key.protocol not in DRAINED_PROTOCOLS
        for real in _by_key(actual[key].real_servers)
    )
    return IPVSPlan(
        changes=tuple(changes),
        removals=tuple(removals),
        stale=tuple(DeleteVirtualServer(key) for key in stale),
        flushes=tuple(flushes),
        draining=tuple(draining),
    )
