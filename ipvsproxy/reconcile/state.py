"""The kernel's actual state, read once per sync, as planning needs it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ipvsproxy.kernel.protocols import Kernel
from ipvsproxy.model import DUMMY_INTERFACE, IPAddress, IPSetContent, IPVSTable


@dataclass(frozen=True, slots=True)
class KernelState:
    ipvs: IPVSTable = field(default_factory=lambda: MappingProxyType({}))
    interface_exists: bool = False
    # Addresses bound on the dummy interface.
    bound_addresses: frozenset[IPAddress] = frozenset()
    ipsets: Mapping[str, IPSetContent] = field(default_factory=lambda: MappingProxyType({}))


EMPTY_KERNEL = KernelState()


def observe(kernel: Kernel, interface: str = DUMMY_INTERFACE) -> KernelState:
    return KernelState(
        ipvs=kernel.ipvs.dump(),
        interface_exists=kernel.addresses.interface_exists(interface),
        bound_addresses=kernel.addresses.addresses(interface),
        ipsets=kernel.ipsets.list_sets(),
    )
