"""The narrow interfaces through which everything reaches the kernel.

Each has a real implementation and an in-memory fake (``kernel.testing``, for tests only);
both pass the contract suite in ``tests/contract``. Nothing here knows about Kubernetes.

A write the kernel does not take comes back as an ``OpError`` in its batch's result (or as
an ``OSError`` from a single call) carrying the kernel's errno, the fake's the same as the
kernel's: ``kernel.errors.error_class`` reads it as transient, out of step with what the
caller believed, or a refusal of that one object.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

# How callers read the kernel's refusals, part of these interfaces: errors.py holds no netlink
# code, so the pure planner imports this module alone of the kernel layer.
from ipvsproxy.kernel.errors import (
    KERNEL_ERRORS,
    ErrorClass,
    error_class,
    refusal,
    refusal_reason,
)
from ipvsproxy.model import (
    AddressOp,
    BatchResult,
    IPAddress,
    IPFamily,
    IPSetContent,
    IPSetSpec,
    IptablesChainDiff,
    IptablesRuleset,
    IPVSOp,
    IPVSTable,
    IPVSTimeouts,
    OpError,
    RealServerKey,
    VirtualServerKey,
    VirtualServerState,
)

__all__ = [
    "CONNTRACK_HASHSIZE",
    "KERNEL_ERRORS",
    "MODULE_PREFIX",
    "AddressKernel",
    "ConntrackKernel",
    "ErrorClass",
    "IPSetKernel",
    "IPVSKernel",
    "IptablesKernel",
    "Kernel",
    "SysctlKernel",
    "as_listed",
    "error_class",
    "refusal",
    "refusal_reason",
]


class IPVSKernel(Protocol):
    def dump(self, *, real_servers: bool = True, traffic: bool = True) -> IPVSTable:
        """Every virtual server with its real servers and counters.

        Without ``real_servers`` every virtual server's real servers are left out (empty);
        without ``traffic`` the real servers' traffic statistics are not read (left zero),
        their connection counts still are. Leaving out what a caller does not use keeps the
        dump of a large table small and quick.
        """
        ...

    def listed(self) -> Iterator[VirtualServerState]:
        """The virtual servers of ``dump(real_servers=False)``, in its order, each decoded
        only as the iteration reaches it: a caller that does other work between two (a full
        sync letting changes through) need not wait for the whole table's decoding."""
        ...

    def virtual_server(self, key: VirtualServerKey) -> VirtualServerState | None:
        """One virtual server with its real servers and counters, as ``dump`` would give it,
        without reading the rest of the table; None when the kernel has no such one."""
        ...

    def with_real_servers(
        self, listed: VirtualServerState, *, traffic: bool = True
    ) -> VirtualServerState | None:
        """``listed`` (from ``listed()`` or ``dump(real_servers=False)``) with its real
        servers and their counters read now, as ``virtual_server`` would give them but
        without reading the virtual server again (``traffic`` as for ``dump``); None when the
        kernel no longer has it."""
        ...

    def apply(self, ops: Sequence[IPVSOp]) -> BatchResult:
        """Apply ops in order, batched; one result per op. A failed op never stops the rest."""
        ...

    def timeouts(self) -> IPVSTimeouts:
        """The connection timeouts (TCP, TCP after FIN, UDP) in seconds."""
        ...

    def set_timeouts(self, timeouts: IPVSTimeouts) -> None:
        """Set the non-zero timeouts and leave the others (ipvsadm --set); OSError if refused."""
        ...


class AddressKernel(Protocol):
    """Service addresses bound to a dummy interface (kube-ipvs0)."""

    def ensure_interface(self, name: str) -> None: ...

    def interface_exists(self, name: str) -> bool: ...

    def delete_interface(self, name: str) -> None: ...

    def addresses(self, name: str) -> frozenset[IPAddress]: ...

    def all_addresses(self) -> frozenset[IPAddress]:
        """Every address on every interface: the node's own and kube-ipvs0's alike."""
        ...

    def local_addresses(self, except_interface: str) -> frozenset[IPAddress]:
        """Every address on every interface but ``except_interface`` (an address it shares
        with another interface included): the node's own, as kube-proxy lists them."""
        ...

    def listed(self, name: str) -> Iterator[tuple[IPAddress, bool]]:
        """Every address of ``all_addresses``, each with whether it is on ``name`` (those
        of ``addresses(name)``), from one reading at the first step, each decoded only as
        the iteration reaches it: a caller that does other work between two (a full sync
        letting changes through) need not wait for 10,000 service addresses' decoding. An
        address on two interfaces comes twice."""
        ...

    def apply(self, name: str, ops: Sequence[AddressOp]) -> BatchResult: ...


def as_listed(spec: IPSetSpec) -> IPSetSpec:
    """What ``IPSetKernel.list_sets`` tells of a set made from ``spec``.

    The kernel keeps no comment, and a bitmap:port set has no address family (it is reported
    as IPv4): compare a desired spec with a listed one through this.
    """
    family = IPFamily.IPV4 if spec.set_type == "bitmap:port" else spec.family
    return IPSetSpec(spec.name, spec.set_type, family, options=spec.options)


def merged_sets(parts: Iterable[IPSetContent]) -> dict[str, IPSetContent]:
    """The sets of ``IPSetKernel.listed``'s parts: each set's entries, from all its parts."""
    specs: dict[str, IPSetSpec] = {}
    entries: dict[str, set[str]] = {}
    for part in parts:
        specs.setdefault(part.spec.name, part.spec)
        entries.setdefault(part.spec.name, set()).update(part.entries)
    return {name: IPSetContent(spec, frozenset(entries[name])) for name, spec in specs.items()}


class IPSetKernel(Protocol):
    def list_sets(self) -> Mapping[str, IPSetContent]:
        """Our sets (``as_listed``), each entry in ipset(8)'s syntax as Python prints its
        addresses: the form translate writes them in, so equal entries compare equal."""
        ...

    def listed(self) -> Iterator[IPSetContent]:
        """The sets of ``list_sets`` from one reading at the first step, in parts decoded
        only as the iteration reaches each (``merged_sets`` joins them): a set comes whole or
        in several parts in a row, each with its spec and some of its entries, so that a
        caller doing other work between two need not wait for 10,000 entries' decoding."""
        ...

    def create(self, spec: IPSetSpec) -> None: ...

    def destroy(self, name: str) -> None: ...

    def add(self, name: str, entries: Sequence[str]) -> BatchResult: ...

    def delete(self, name: str, entries: Sequence[str]) -> BatchResult: ...

    def replace(self, content: IPSetContent) -> None:
        """Make the set hold exactly ``content`` atomically (temporary set, swap, destroy)."""
        ...


class IptablesKernel(Protocol):
    def restore(self, ruleset: IptablesRuleset) -> bool:
        """Write our chains whole (iptables-restore --noflush) and ensure the jumps to them.

        True when it wrote; False when the kernel already held exactly these chains and jumps.
        A chain no longer in ``ruleset`` is left as it is: ``remove`` deletes it.
        """
        ...

    def diff(self, ruleset: IptablesRuleset) -> tuple[IptablesChainDiff, ...]:
        """What ``restore`` would change, chain by chain (none where the kernel agrees)."""
        ...

    def read_ahead(self, family: IPFamily) -> None:
        """Start reading ``family``'s tables now, for the next ``restore`` or ``diff`` of it
        to compare with (unless the family is written meanwhile): a sync that reads the rest
        of the kernel first need not then wait for iptables-save."""
        ...

    def our_chains(self, family: IPFamily) -> Mapping[str, frozenset[str]]:
        """table -> names of the chains that belong to us (KUBE-*) that exist now."""
        ...

    def remove(self, family: IPFamily, chains: Mapping[str, frozenset[str]]) -> None:
        """Delete the jumps to these chains, then flush and delete them; nothing else."""
        ...


# A kernel module's parameter (/sys/module/MODULE/parameters/NAME) goes by the name
# ``module.MODULE.parameters.NAME`` and is read and written as a sysctl is.
MODULE_PREFIX = "module."
CONNTRACK_HASHSIZE = f"{MODULE_PREFIX}nf_conntrack.parameters.hashsize"


class SysctlKernel(Protocol):
    """Kernel parameters by their sysctl names, and modules' parameters (``MODULE_PREFIX``)."""

    def get(self, name: str) -> str | None: ...

    def set(self, name: str, value: str) -> None: ...


class ConntrackKernel(Protocol):
    def delete_entries(
        self, targets: Sequence[tuple[VirtualServerKey, RealServerKey]]
    ) -> list[int | OpError]:
        """Delete the flows to each service (protocol, address, port) NATed to its endpoint.

        The deletes go out batched; per target, how many flows went, or the kernel's refusal.
        OSError when the flows cannot be read at all.
        """
        ...


@dataclass(frozen=True, slots=True)
class Kernel:
    """The six interfaces as one object, so callers pass the kernel around whole."""

    ipvs: IPVSKernel
    addresses: AddressKernel
    ipsets: IPSetKernel
    iptables: IptablesKernel
    sysctl: SysctlKernel
    conntrack: ConntrackKernel
