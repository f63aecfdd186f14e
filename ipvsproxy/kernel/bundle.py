"""The six kernel interfaces as one object, so callers pass the kernel around whole."""

from __future__ import annotations

from dataclasses import dataclass

from ipvsproxy.kernel.interfaces import (
    AddressKernel,
    ConntrackKernel,
    IPSetKernel,
    IptablesKernel,
    IPVSKernel,
    SysctlKernel,
)


@dataclass(frozen=True, slots=True)
class Kernel:
    ipvs: IPVSKernel
    addresses: AddressKernel
    ipsets: IPSetKernel
    iptables: IptablesKernel
    sysctl: SysctlKernel
    conntrack: ConntrackKernel
