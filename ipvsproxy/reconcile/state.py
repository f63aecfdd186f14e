"""The kernel's actual state, read once per sync, as planning needs it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ipvsproxy.gcpause import without_cyclic_gc
from ipvsproxy.kernel.protocols import IPVSKernel, Kernel, SysctlKernel
from ipvsproxy.model import (
    DUMMY_INTERFACE,
    IPAddress,
    IPSetContent,
    IPVSTable,
    IPVSTimeouts,
    VirtualServerKey,
    VirtualServerState,
)
from ipvsproxy.reconcile import parameters


@dataclass(frozen=True, slots=True)
class KernelState:
    ipvs: IPVSTable = field(default_factory=lambda: MappingProxyType({}))
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


def read_ipvs_between(ipvs: IPVSKernel, between: Between) -> IPVSTable:
    """The IPVS table listed, then each virtual server's real servers read in turn,
    ``between`` run before each read (an incremental sync, say, so that it need not wait for
    the whole table): what it wrote is read again at the end, so the table is as the kernel
    holds it once ``between`` stops."""
    table: dict[VirtualServerKey, VirtualServerState] = {}
    written: set[VirtualServerKey] = set()
    for key, listed in ipvs.dump(real_servers=False).items():
        written |= between()
        state = ipvs.with_real_servers(listed, traffic=False)
        if state is not None:
            table[key] = state
    written |= between()
    for key in written:
        state = ipvs.virtual_server(key)
        if state is None:
            table.pop(key, None)
        else:
            table[key] = state
    return table


@without_cyclic_gc
def observe(
    kernel: Kernel, interface: str = DUMMY_INTERFACE, between: Between | None = None
) -> KernelState:
    """The kernel's state; with ``between``, the IPVS table is read as ``read_ipvs_between``
    does, and the rest after it."""
    return KernelState(
        # Planning reads real servers and their connections, never their traffic.
        ipvs=kernel.ipvs.dump(traffic=False)
        if between is None
        else read_ipvs_between(kernel.ipvs, between),
        interface_exists=kernel.addresses.interface_exists(interface),
        bound_addresses=kernel.addresses.addresses(interface),
        local_addresses=kernel.addresses.all_addresses(),
        ipsets=kernel.ipsets.list_sets(),
        sysctls=read_parameters(kernel.sysctl),
        ipvs_timeouts=kernel.ipvs.timeouts(),
    )
