"""``ipvsproxy cleanup``: remove what ipvsproxy or kube-proxy's IPVS mode made, nothing else.

Unlike kube-proxy's cleanup, which flushes the whole IPVS table, ownership is decided from the
kernel alone, without the cluster:

* the virtual servers the kernel's records say a service proxy made (``ownership``: on
  kube-ipvs0, in a service-address ipset, or a NodePort on a node address), read before the
  sets go;
* our iptables chains (and the jumps to them), then our ipsets (they cannot go while a rule
  refers to them), then kube-ipvs0 itself.

The planner is pure; the executor applies a plan and reports one line per object.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from types import MappingProxyType

from ipvsproxy.kernel.protocols import (
    KERNEL_ERRORS,
    AddressKernel,
    IPSetKernel,
    IptablesKernel,
    IPVSKernel,
)
from ipvsproxy.model import (
    DUMMY_INTERFACE,
    DeleteVirtualServer,
    IPAddress,
    IPFamily,
    IPVSTable,
    VirtualServerKey,
)
from ipvsproxy.names import SETS, set_name
from ipvsproxy.reconcile.ownership import IPSets, made_by_a_proxy

# Sets kube-proxy's IPVS mode made in past releases that ipvsproxy does not.
KUBE_PROXY_ONLY_SETS = ("KUBE-LOAD-BALANCER-MASQ",)

OUR_SETS = frozenset(
    set_name(base, family) for base in (*SETS, *KUBE_PROXY_ONLY_SETS) for family in IPFamily
)

Chains = Mapping[str, frozenset[str]]  # table -> chain names


@dataclass(frozen=True, slots=True)
class ObservedState:
    """What cleanup reads from the kernel before it removes anything."""

    ipvs: IPVSTable
    dummy_addresses: frozenset[IPAddress]
    dummy_exists: bool
    node_addresses: frozenset[IPAddress]
    ipsets: IPSets
    chains: Mapping[IPFamily, Chains]
    # What could not be read (e.g. no ip6tables): reported as failed, the rest still goes.
    unreadable: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CleanupPlan:
    virtual_servers: tuple[VirtualServerKey, ...] = ()
    chains: Mapping[IPFamily, Chains] = field(default_factory=lambda: MappingProxyType({}))
    ipsets: tuple[str, ...] = ()
    delete_interface: bool = False

    def __bool__(self) -> bool:
        return bool(self.virtual_servers or self.chains or self.ipsets or self.delete_interface)


@dataclass(frozen=True, slots=True)
class CleanupReport:
    """One line per object: "removed ..." or "could not remove ...: reason"."""

    removed: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()


def observe(
    ipvs: IPVSKernel, addresses: AddressKernel, ipsets: IPSetKernel, iptables: IptablesKernel
) -> ObservedState:
    chains: dict[IPFamily, Chains] = {}
    unreadable: list[str] = []
    for family in IPFamily:
        try:
            chains[family] = iptables.our_chains(family)
        except KERNEL_ERRORS as error:
            unreadable.append(f"could not read {family} iptables chains: {_reason(error)}")
    return ObservedState(
        # Only the virtual servers are removed (their real servers with them): one dump.
        ipvs=ipvs.dump(real_servers=False),
        dummy_addresses=addresses.addresses(DUMMY_INTERFACE),
        dummy_exists=addresses.interface_exists(DUMMY_INTERFACE),
        node_addresses=addresses.all_addresses(),
        ipsets=ipsets.list_sets(),
        chains=chains,
        unreadable=tuple(unreadable),
    )


def plan_cleanup(observed: ObservedState) -> CleanupPlan:
    ours = partial(
        made_by_a_proxy,
        dummy_addresses=observed.dummy_addresses,
        node_addresses=observed.node_addresses,
        ipsets=observed.ipsets,
    )
    return CleanupPlan(
        virtual_servers=tuple(
            sorted((key for key in observed.ipvs if ours(key)), key=VirtualServerKey.sort_key)
        ),
        chains={
            family: {table: names for table, names in chains.items() if names}
            for family, chains in observed.chains.items()
            if any(chains.values())
        },
        ipsets=tuple(sorted(name for name in observed.ipsets if name in OUR_SETS)),
        delete_interface=observed.dummy_exists,
    )


def _virtual_server(key: VirtualServerKey) -> str:
    return f"virtual server {key}"


def _chains(family: IPFamily, chains: Chains) -> str:
    names = ", ".join(
        f"{table}/{chain}" for table in sorted(chains) for chain in sorted(chains[table])
    )
    return f"{family} iptables chains {names}"


def _ipset(name: str) -> str:
    return f"ipset {name}"


_INTERFACE = f"interface {DUMMY_INTERFACE}"


def planned_removals(plan: CleanupPlan) -> tuple[str, ...]:
    """What ``execute_cleanup`` would remove, in its order, named as its report names it."""
    return (
        *map(_virtual_server, plan.virtual_servers),
        *(_chains(family, chains) for family, chains in plan.chains.items()),
        *map(_ipset, plan.ipsets),
        *((_INTERFACE,) if plan.delete_interface else ()),
    )


def _reason(error: Exception) -> str:
    # str(OSError) prefixes "[Errno N]", which says nothing to a reader.
    return error.strerror if isinstance(error, OSError) and error.strerror else str(error)


def _attempt(action: Callable[[], None], what: str, removed: list[str], failed: list[str]) -> None:
    try:
        action()
    # Best effort: every refusal is one line and the rest goes on; anything else is a bug.
    except KERNEL_ERRORS as error:
        failed.append(f"could not remove {what}: {_reason(error)}")
    else:
        removed.append(f"removed {what}")


def execute_cleanup(
    plan: CleanupPlan,
    ipvs: IPVSKernel,
    addresses: AddressKernel,
    ipsets: IPSetKernel,
    iptables: IptablesKernel,
) -> CleanupReport:
    removed: list[str] = []
    failed: list[str] = []
    results = ipvs.apply([DeleteVirtualServer(key) for key in plan.virtual_servers])
    for key, result in zip(plan.virtual_servers, results, strict=True):
        if result is None:
            removed.append(f"removed {_virtual_server(key)}")
        else:
            failed.append(f"could not remove {_virtual_server(key)}: {result.message}")
    for family, chains in plan.chains.items():
        what = _chains(family, chains)
        _attempt(partial(iptables.remove, family, chains), what, removed, failed)
    for name in plan.ipsets:
        _attempt(partial(ipsets.destroy, name), _ipset(name), removed, failed)
    if plan.delete_interface:
        delete = partial(addresses.delete_interface, DUMMY_INTERFACE)
        _attempt(delete, _INTERFACE, removed, failed)
    return CleanupReport(tuple(removed), tuple(failed))


def plan_leftovers(
    ipvs: IPVSKernel, addresses: AddressKernel, ipsets: IPSetKernel, iptables: IptablesKernel
) -> tuple[CleanupPlan, tuple[str, ...]]:
    """What ``ipvsproxy cleanup`` would remove, and what it could not read."""
    observed = observe(ipvs, addresses, ipsets, iptables)
    return plan_cleanup(observed), observed.unreadable


def remove_leftovers(
    ipvs: IPVSKernel, addresses: AddressKernel, ipsets: IPSetKernel, iptables: IptablesKernel
) -> CleanupReport:
    """Observe, plan and remove: what ``ipvsproxy cleanup`` does."""
    plan, unreadable = plan_leftovers(ipvs, addresses, ipsets, iptables)
    report = execute_cleanup(plan, ipvs, addresses, ipsets, iptables)
    return CleanupReport(report.removed, (*unreadable, *report.failed))
