"""The kernel's actual state, read once per sync, as planning needs it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ipvsproxy.gcpause import without_cyclic_gc
from ipvsproxy.kernel.protocols import IPVSKernel, Kernel, SysctlKernel
from ipvsproxy.model import (
    DUMMY_INTERFACE,
    DesiredVirtualServer,
    IPAddress,
    IPSetContent,
    IPVSTable,
    IPVSTimeouts,
    VirtualServerKey,
    VirtualServerState,
)
from ipvsproxy.reconcile import parameters
from ipvsproxy.reconcile.ipvs_plan import NOTHING_MATCHED, in_sync


@dataclass(frozen=True, slots=True)
class KernelState:
    ipvs: IPVSTable = field(default_factory=lambda: MappingProxyType({}))
    # Virtual servers found in sync with these desired values when read (see
    # ``read_ipvs_between``); planning compares them again only if their value changed since.
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


# Run between the reads of two virtual servers; gives those it may have written.
Between = Callable[[], frozenset[VirtualServerKey]]
# The newest desired virtual servers, as ``between`` leaves them.
DesiredNow = Callable[[], Mapping[VirtualServerKey, DesiredVirtualServer]]


def read_ipvs_between(
    ipvs: IPVSKernel, between: Between, desired: DesiredNow | None = None
) -> tuple[IPVSTable, Mapping[VirtualServerKey, DesiredVirtualServer]]:
    """The IPVS table listed, then each virtual server's real servers read in turn,
    ``between`` run before each read (an incremental sync, say, so that it need not wait for
    the whole table): what it wrote is read again at the end, so the table is as the kernel
    holds it once ``between`` stops.

    With ``desired``, each virtual server is compared with its desired value as it is read,
    and those found ``in_sync`` are given with the value they matched: planning need not
    compare them again while that value stands, so the comparison of a big table is spread
    over the read, between the syncs it lets through."""
    table: dict[VirtualServerKey, VirtualServerState] = {}
    as_desired: dict[VirtualServerKey, DesiredVirtualServer] = {}
    written: set[VirtualServerKey] = set()

    def found(key: VirtualServerKey, state: VirtualServerState | None) -> None:
        as_desired.pop(key, None)
        if state is None:
            table.pop(key, None)
            return
        table[key] = state
        wanted = desired().get(key) if desired is not None else None
        if wanted is not None and in_sync(wanted, state):
            as_desired[key] = wanted

    for key, listed in ipvs.dump(real_servers=False).items():
        written |= between()
        found(key, ipvs.with_real_servers(listed, traffic=False))
    written |= between()
    for key in written:
        found(key, ipvs.virtual_server(key))
    return table, as_desired


@without_cyclic_gc
def observe(
    kernel: Kernel,
    interface: str = DUMMY_INTERFACE,
    between: Between | None = None,
    desired: DesiredNow | None = None,
) -> KernelState:
    """The kernel's state; with ``between``, the IPVS table is read as ``read_ipvs_between``
    does (compared with ``desired`` as it goes), and the rest after it."""
    if between is None:
        # Planning reads real servers and their connections, never their traffic.
        table, as_desired = kernel.ipvs.dump(traffic=False), NOTHING_MATCHED
    else:
        table, as_desired = read_ipvs_between(kernel.ipvs, between, desired)
    return KernelState(
        ipvs=table,
        ipvs_as_desired=as_desired,
        interface_exists=kernel.addresses.interface_exists(interface),
        bound_addresses=kernel.addresses.addresses(interface),
        local_addresses=kernel.addresses.all_addresses(),
        ipsets=kernel.ipsets.list_sets(),
        sysctls=read_parameters(kernel.sysctl),
        ipvs_timeouts=kernel.ipvs.timeouts(),
    )
