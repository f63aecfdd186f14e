"""One sync's whole plan: desired state against the kernel's, every kind of change, in order."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from ipvsproxy.gcpause import without_cyclic_gc
from ipvsproxy.model import (
    DUMMY_INTERFACE,
    BindAddress,
    DesiredState,
    EnsureInterface,
    IPAddress,
    IPSetOp,
    IptablesRuleset,
    IPVSTimeouts,
    PlanOp,
    RealServerRef,
    RestoreIptables,
    SetIPVSTimeouts,
    SetSysctl,
    UnbindAddress,
)
from ipvsproxy.reconcile.addresses import plan_addresses
from ipvsproxy.reconcile.graceful import DEFAULT_GRACE_PERIOD
from ipvsproxy.reconcile.ipsets import plan_ipsets
from ipvsproxy.reconcile.ipvs_plan import NO_DRAINS, IPVSPlan, owned_addresses, plan_ipvs
from ipvsproxy.reconcile.ownership import made_by_a_proxy
from ipvsproxy.reconcile.parameters import (
    LEAVE_CONNTRACK,
    ConntrackSettings,
    plan_sysctls,
    plan_timeouts,
)
from ipvsproxy.reconcile.state import KernelState

UNSET_TIMEOUTS = IPVSTimeouts()


@dataclass(frozen=True, slots=True)
class SyncPlan:
    """Apply in field order: nothing serving breaks before its replacement is in place."""

    sysctls: tuple[SetSysctl, ...]
    interface: str
    create_interface: bool
    bind: tuple[BindAddress, ...]
    ipsets: tuple[IPSetOp, ...]
    iptables: tuple[IptablesRuleset, ...]
    timeouts: tuple[SetIPVSTimeouts, ...]
    ipvs: IPVSPlan
    unbind: tuple[UnbindAddress, ...]

    def operations(self) -> tuple[PlanOp, ...]:
        """Every op in apply order; conntrack flushes follow the IPVS deletions they go with."""
        return (
            *self.sysctls,
            *((EnsureInterface(self.interface),) if self.create_interface else ()),
            *self.bind,
            *self.ipsets,
            *map(RestoreIptables, self.iptables),
            *self.timeouts,
            *self.ipvs.ops,
            *self.ipvs.flushes,
            *self.unbind,
        )

    def changes(self) -> tuple[PlanOp, ...]:
        """The ops that always write: all but the iptables restores, which write only on a diff."""
        return tuple(op for op in self.operations() if not isinstance(op, RestoreIptables))

    def counts(self) -> Counter[str]:
        return Counter(type(op).__name__ for op in self.operations())


@without_cyclic_gc
def plan_sync(
    desired: DesiredState,
    actual: KernelState,
    *,
    drains: Mapping[RealServerRef, float] = NO_DRAINS,
    now: float = 0.0,
    grace_period: float = DEFAULT_GRACE_PERIOD,
    interface: str = DUMMY_INTERFACE,
    strict_arp: bool = False,
    timeouts: IPVSTimeouts = UNSET_TIMEOUTS,
    conntrack: ConntrackSettings = LEAVE_CONNTRACK,
    node_addresses_before: frozenset[IPAddress] = frozenset(),
) -> SyncPlan:
    """Pure: the same inputs give the same plan; ``drains``/``now`` drive graceful termination.

    ``strict_arp``, ``timeouts`` and ``conntrack`` (--ipvs-strict-arp, --ipvs-*-timeout,
    --conntrack-*) choose the kernel parameters to set. ``node_addresses_before``: the node's
    addresses that carried virtual servers of ours before, as far as this process knows (see
    ``owned_addresses``).
    """
    bind, unbind = plan_addresses(desired, actual.bound_addresses)
    owned = owned_addresses(desired, actual.bound_addresses, node_addresses_before)
    # What kube-proxy (or an earlier us) made that the cluster no longer wants: on a node
    # taken over, its records are the only ones that say so.
    claimed = frozenset(
        key
        for key in actual.ipvs
        if key not in desired.virtual_servers
        and key.address not in owned
        and made_by_a_proxy(
            key,
            dummy_addresses=actual.bound_addresses,
            node_addresses=actual.local_addresses,
            ipsets=actual.ipsets,
        )
    )
    return SyncPlan(
        sysctls=plan_sysctls(actual.sysctls, strict_arp=strict_arp, conntrack=conntrack),
        interface=interface,
        create_interface=not actual.interface_exists,
        bind=bind,
        ipsets=plan_ipsets(desired.ipsets, actual.ipsets),
        iptables=desired.iptables,
        timeouts=plan_timeouts(timeouts, actual.ipvs_timeouts),
        ipvs=plan_ipvs(
            desired,
            actual.ipvs,
            owned,
            claimed=claimed,
            drains=drains,
            now=now,
            grace_period=grace_period,
            as_desired=actual.ipvs_as_desired,
        ),
        unbind=unbind,
    )
