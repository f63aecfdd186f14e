"""The kernel's actual state, read once per sync, as planning needs it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TypeVar

from ipvsproxy.gcpause import without_cyclic_gc
from ipvsproxy.kernel.protocols import (
    IPVSKernel,
    Kernel,
    SysctlKernel,
    as_listed,
    merged_sets,
)
from ipvsproxy.model import (
    DUMMY_INTERFACE,
    IPVS_OPS,
    AddIPSetEntries,
    BindAddress,
    CreateIPSet,
    DeleteIPSetEntries,
    DesiredVirtualServer,
    EnsureInterface,
    IPAddress,
    IPFamily,
    IPSetContent,
    IPVSTable,
    IPVSTimeouts,
    PlanOp,
    RealServerKey,
    RealServerState,
    ReplaceIPSet,
    SetIPVSTimeouts,
    SetSysctl,
    UnbindAddress,
    VirtualServerKey,
    VirtualServerState,
    virtual_of,
)
from ipvsproxy.reconcile import parameters
from ipvsproxy.reconcile.ipvs_plan import NOTHING_MATCHED, in_sync

T = TypeVar("T")
NOTHING_READ: IPVSTable = MappingProxyType({})
NO_REAL_SERVERS: Mapping[RealServerKey, RealServerState] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class KernelState:
    ipvs: IPVSTable = field(default_factory=lambda: NOTHING_READ)
    # Virtual servers found in sync with these desired values when read (see
    # ``read_ipvs_between``): their entries in ``ipvs`` keep no real servers, and planning
    # does not compare them again.
    ipvs_as_desired: Mapping[VirtualServerKey, DesiredVirtualServer] = field(
        default_factory=lambda: NOTHING_MATCHED
    )
    interface_exists: bool = False
    # Addresses bound on the dummy interface.
    bound_addresses: frozenset[IPAddress] = frozenset()
    # Every address of the node, on any interface (the dummy one's too): where a NodePort
    # virtual server a service proxy made can be (see ``ownership``).
    local_addresses: frozenset[IPAddress] = frozenset()
    ipsets: Mapping[str, IPSetContent] = field(default_factory=lambda: MappingProxyType({}))
    # The kernel parameters planning reads (parameters.READ), a value None where absent;
    # None for parameters not read (an incremental sync trusts the last full one for them).
    sysctls: Mapping[str, str | None] | None = None
    ipvs_timeouts: IPVSTimeouts | None = None


# A fresh kernel: nothing of ours, none of kube-proxy's parameters set.
EMPTY_KERNEL = KernelState(sysctls=MappingProxyType({}), ipvs_timeouts=IPVSTimeouts())


def read_parameters(sysctl: SysctlKernel) -> Mapping[str, str | None]:
    """The kernel parameters planning reads (``parameters.READ``), None where absent."""
    return MappingProxyType({name: sysctl.get(name) for name in parameters.READ})


# Run between two reads of the kernel (an incremental sync, say); gives the ops it applied.
Between = Callable[[], Sequence[PlanOp]]
# The newest desired virtual servers, as ``between`` leaves them.
DesiredNow = Callable[[], Mapping[VirtualServerKey, DesiredVirtualServer]]


def read_ipvs_between(
    ipvs: IPVSKernel, between: Between, desired: DesiredNow | None = None
) -> tuple[IPVSTable, Mapping[VirtualServerKey, DesiredVirtualServer]]:
    """The IPVS table listed (each virtual server decoded in turn), then each one's real
    servers read,
    ``between`` run before each read (an incremental sync, say, so that it need not wait for
    the whole table): what it wrote is read again right after it, so the table is as the
    kernel holds it once ``between`` stops.

    With ``desired``, each virtual server is compared with its desired value as it is read,
    and those found ``in_sync`` are given with the value they matched: planning need not
    compare them again, so the comparison of a big table is spread over the read, between
    the syncs it lets through. Their entries in the table keep no real servers (the desired
    value stands for them: a whole table's real servers are tens of MB at 10,000 services),
    so one whose desired value changed by the end without being written (a sync held it
    back) is read again."""
    table: dict[VirtualServerKey, VirtualServerState] = {}
    as_desired: dict[VirtualServerKey, DesiredVirtualServer] = {}

    def found(key: VirtualServerKey, state: VirtualServerState | None) -> None:
        as_desired.pop(key, None)
        if state is None:
            table.pop(key, None)
            return
        wanted = desired().get(key) if desired is not None else None
        if wanted is not None and in_sync(wanted, state):
            as_desired[key] = wanted
            state = VirtualServerState(state.server, NO_REAL_SERVERS, state.stats)
        table[key] = state

    def read_again(keys: Iterable[VirtualServerKey]) -> None:
        for key in sorted(set(keys), key=VirtualServerKey.sort_key):
            found(key, ipvs.virtual_server(key))

    for listed in ipvs.listed():
        # What a sync wrote is read again at once, while syncs still come through.
        read_again(_written_virtual_servers(between()))
        found(listed.server.key, ipvs.with_real_servers(listed, traffic=False))
    written = set(_written_virtual_servers(between()))
    if desired is not None:
        newest = desired()
        written.update(key for key, wanted in as_desired.items() if newest.get(key) is not wanted)
    read_again(written)
    return table, as_desired


def _written_virtual_servers(ops: Iterable[PlanOp]) -> Iterator[VirtualServerKey]:
    return (virtual_of(op) for op in ops if isinstance(op, IPVS_OPS))


def replayed(state: KernelState, ops: Iterable[PlanOp]) -> KernelState:
    """``state`` as ``ops``, applied after it was read, left the kernel: all but IPVS, which
    ``read_ipvs_between`` reads again. Each op sets what it writes (an entry present or
    absent, a value), so ops the read already saw may be replayed too, in their order. A set
    is copied once however many ops change it: a full sync replays tens of syncs' ops onto
    sets of 10,000 entries."""
    bound, local = set(state.bound_addresses), set(state.local_addresses)
    specs = {name: content.spec for name, content in state.ipsets.items()}
    changed: dict[str, set[str]] = {}

    def entries(name: str) -> set[str]:
        if name not in changed:
            # Sets made by an op are in ``changed`` from that op on.
            changed[name] = set(state.ipsets[name].entries)
        return changed[name]

    sysctls = None if state.sysctls is None else dict(state.sysctls)
    timeouts, interface_exists = state.ipvs_timeouts, state.interface_exists
    for op in ops:
        match op:
            case BindAddress(address):
                bound.add(address)
                local.add(address)
            case UnbindAddress(address):
                # Ours to unbind only from kube-ipvs0, where no node address is.
                bound.discard(address)
                local.discard(address)
            case CreateIPSet(spec) if spec.name not in specs:
                specs[spec.name] = as_listed(spec)
                changed[spec.name] = set()
            case ReplaceIPSet(content):
                specs[content.spec.name] = as_listed(content.spec)
                changed[content.spec.name] = set(content.entries)
            case AddIPSetEntries(name, added) if name in specs:
                entries(name).update(added)
            case DeleteIPSetEntries(name, deleted) if name in specs:
                entries(name).difference_update(deleted)
            case SetSysctl(name, value) if sysctls is not None:
                sysctls[name] = value
            case SetIPVSTimeouts(wanted) if timeouts is not None:
                timeouts = wanted.set_over(timeouts)
            case EnsureInterface():
                interface_exists = True
    ipsets = {
        name: IPSetContent(spec, frozenset(changed[name]))
        if name in changed
        else state.ipsets[name]
        for name, spec in specs.items()
    }
    return replace(
        state,
        bound_addresses=frozenset(bound),
        local_addresses=frozenset(local),
        ipsets=MappingProxyType(ipsets),
        sysctls=None if sysctls is None else MappingProxyType(sysctls),
        ipvs_timeouts=timeouts,
        interface_exists=interface_exists,
    )


@without_cyclic_gc
def observe(
    kernel: Kernel,
    interface: str = DUMMY_INTERFACE,
    between: Between | None = None,
    desired: DesiredNow | None = None,
    iptables: Iterable[IPFamily] = (),
) -> KernelState:
    """The kernel's state. With ``between``, it runs before every read: the IPVS table is
    read last, as ``read_ipvs_between`` reads it (compared with ``desired`` as it goes), and
    the rest as the ops ``between`` applied left it (``replayed``).

    ``iptables``: the families whose rules the sync will restore, read ahead meanwhile (the
    rules are not part of the state: the iptables layer compares them as it restores)."""
    if between is None:
        for family in iptables:
            kernel.iptables.read_ahead(family)
        # Planning reads real servers and their connections, never their traffic.
        return _read_all_but_ipvs(kernel, interface, lambda: None, kernel.ipvs.dump(traffic=False))
    applied: list[PlanOp] = []

    def step() -> Sequence[PlanOp]:
        ops = between()
        applied.extend(ops)
        return ops

    for family in iptables:
        # Starting a process costs tens of ms in the lab: syncs come due between two.
        step()
        kernel.iptables.read_ahead(family)
    rest = _read_all_but_ipvs(kernel, interface, step)
    table, as_desired = read_ipvs_between(kernel.ipvs, step, desired)
    return replace(replayed(rest, applied), ipvs=table, ipvs_as_desired=as_desired)


def _read_all_but_ipvs(
    kernel: Kernel,
    interface: str,
    before_each: Callable[[], object],
    ipvs: IPVSTable = NOTHING_READ,
) -> KernelState:
    """Everything planning reads but the IPVS table (given as ``ipvs``), ``before_each``
    read run first, and before each address and each part of the ipsets decoded: 10,000
    service addresses, or a set of 10,000 entries, took 0.1-0.3 s to decode in the lab."""

    def after(read: Callable[[], T]) -> T:
        before_each()
        return read()

    interface_exists = after(lambda: kernel.addresses.interface_exists(interface))
    bound: set[IPAddress] = set()
    local: set[IPAddress] = set()
    for address, on_interface in _each_after(kernel.addresses.listed(interface), before_each):
        local.add(address)
        if on_interface:
            bound.add(address)
    return KernelState(
        ipvs=ipvs,
        interface_exists=interface_exists,
        bound_addresses=frozenset(bound),
        local_addresses=frozenset(local),
        ipsets=MappingProxyType(merged_sets(_each_after(kernel.ipsets.listed(), before_each))),
        sysctls=after(lambda: read_parameters(kernel.sysctl)),
        ipvs_timeouts=after(kernel.ipvs.timeouts),
    )


def _each_after(items: Iterable[T], before_each: Callable[[], object]) -> Iterator[T]:
    """``items``, ``before_each`` run before each is taken (and before the end is found)."""
    taken = iter(items)
    while True:
        before_each()
        try:
            item = next(taken)
        except StopIteration:
            return
        yield item
