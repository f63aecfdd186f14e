"""An incremental sync: plan only what changed, against what the last sync left.

After a sync in which every op applied, the kernel holds the desired state it was given
(plus the real servers still draining). An incremental sync trusts that: it reads from the
kernel only the virtual servers whose connection counts decide something (those losing TCP
real servers, and on a drain check the draining ones), and plans from the ``DesiredChange``
alone — the virtual servers that changed, the ipset entries and addresses
that came and went — so its cost follows the change, not the cluster. A wrong belief
(someone changed the kernel meanwhile) shows up as a failed op, which makes the caller's
next sync a full one; the periodic full sync repairs whatever no op touched.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from types import MappingProxyType

from ipvsproxy.model import (
    BindAddress,
    DesiredChange,
    DesiredState,
    DesiredVirtualServer,
    IPVSTable,
    RealServer,
    RealServerKey,
    RealServerRef,
    RealServerState,
    UnbindAddress,
    VirtualServerKey,
    VirtualServerState,
    address_sort_key,
)
from ipvsproxy.reconcile.graceful import DEFAULT_GRACE_PERIOD, DRAINED_PROTOCOLS, Drain
from ipvsproxy.reconcile.ipsets import plan_entry_changes
from ipvsproxy.reconcile.ipvs_plan import excluded, plan_ipvs
from ipvsproxy.reconcile.syncplan import SyncPlan

NOTHING_READ: IPVSTable = MappingProxyType({})


def to_read(
    desired: DesiredState,
    change: DesiredChange,
    drains: Iterable[RealServerRef],
    drain_check: bool,
) -> frozenset[VirtualServerKey]:
    """The virtual servers to read before planning ``change``: those that stay but lose TCP
    real servers (idle ones are deleted at once and busy ones drained, as kube-proxy decides
    from the kernel's counts) and, on a ``drain_check``, those with real servers draining."""
    wanted = desired.virtual_servers
    losing = (
        key
        for key, before in change.virtual_servers.items()
        if before is not None
        and key.protocol in DRAINED_PROTOCOLS
        and (after := wanted.get(key)) is not None
        and any(real not in after.real_servers for real in before.real_servers)
    )
    draining = (ref.virtual for ref in drains) if drain_check else ()
    return frozenset((*losing, *draining))


def believed_ipvs(
    before: Mapping[VirtualServerKey, DesiredVirtualServer | None],
    drains: Iterable[Drain],
) -> dict[VirtualServerKey, VirtualServerState]:
    """The virtual servers ``before`` names as the previous, fully applied, sync left them,
    with ``drains`` (theirs) at weight 0."""
    draining: dict[VirtualServerKey, list[Drain]] = {}
    for drain in drains:
        draining.setdefault(drain.ref.virtual, []).append(drain)
    table: dict[VirtualServerKey, VirtualServerState] = {}
    for key, wanted in before.items():
        if wanted is None:
            continue
        # Connection counts are unknown where the kernel was not read (``to_read`` reads where
        # they decide): assume one, so that a removed TCP real server drains (weight 0) rather
        # than cutting connections, and the next drain check deletes it once idle.
        reals: dict[RealServerKey, RealServerState] = {
            real: RealServerState(server, inactive_connections=1)
            for real, server in wanted.real_servers.items()
        }
        for drain in draining.get(key, ()):
            reals[drain.ref.real] = RealServerState(
                RealServer(drain.ref.real, weight=0),
                active_connections=drain.active_connections,
                inactive_connections=drain.inactive_connections,
            )
        table[key] = VirtualServerState(wanted.server, MappingProxyType(reals))
    return table


def plan_change(
    desired: DesiredState,
    change: DesiredChange,
    *,
    read: IPVSTable = NOTHING_READ,
    missing: frozenset[VirtualServerKey] = frozenset(),
    drains: Mapping[RealServerRef, Drain],
    now: float = 0.0,
    grace_period: float = DEFAULT_GRACE_PERIOD,
    interface: str,
) -> SyncPlan:
    """Pure: the plan of an incremental sync; ``read``: virtual servers just read from the
    kernel (``to_read``), planned as read, and ``missing`` those read that it does not have."""
    before = {
        **change.virtual_servers,
        **{key: desired.virtual_servers.get(key) for key in (*read, *missing)},
    }
    drains = {ref: drain for ref, drain in drains.items() if ref.virtual in before}
    actual = believed_ipvs(before, drains.values())
    actual.update(read)
    for key in missing:
        actual.pop(key, None)
    wanted = desired.virtual_servers
    scoped = replace(
        desired, virtual_servers=MappingProxyType({k: wanted[k] for k in before if k in wanted})
    )
    # The stale virtual servers' addresses were ours: ``owned_addresses`` asked of them alone,
    # and a virtual server the last desired state had is ours wherever it is.
    owned = frozenset(
        key.address
        for key in actual
        if key.address in desired.bound_addresses
        or key.address in desired.node_addresses
        or key.address in desired.node_port_addresses
        or key.address in change.unbound
        or change.virtual_servers.get(key) is not None
    )
    return SyncPlan(
        sysctls=(),
        interface=interface,
        create_interface=False,
        bind=tuple(BindAddress(a) for a in sorted(change.bound, key=address_sort_key)),
        ipsets=plan_entry_changes(change.added_entries, change.removed_entries),
        iptables=desired.iptables if change.iptables else (),
        timeouts=(),
        ipvs=plan_ipvs(
            scoped,
            actual,
            owned,
            drains={ref: drain.started for ref, drain in drains.items()},
            now=now,
            grace_period=grace_period,
        ),
        unbind=tuple(
            UnbindAddress(a)
            for a in sorted(change.unbound, key=address_sort_key)
            if not excluded(a, desired)
        ),
    )
