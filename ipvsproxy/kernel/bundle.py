"""The six kernel interfaces as one object, so callers pass the kernel around whole."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from ipvsproxy.kernel.addresses import FakeAddresses, NetlinkAddresses
from ipvsproxy.kernel.conntrack import FakeConntrack, NetlinkConntrack
from ipvsproxy.kernel.interfaces import (
    AddressKernel,
    ConntrackKernel,
    IPSetKernel,
    IptablesKernel,
    IPVSKernel,
    SysctlKernel,
)
from ipvsproxy.kernel.ipsets import FakeIPSets, NetlinkIPSets
from ipvsproxy.kernel.iptables import FakeIptables, IptablesRestore
from ipvsproxy.kernel.ipvs import AbsentIPVS, FakeIPVS, NetlinkIPVS
from ipvsproxy.kernel.preconditions import IPVSUnavailable
from ipvsproxy.kernel.sysctl import FRESH_KERNEL_SYSCTLS, FakeSysctl, ProcSysctl


@dataclass(frozen=True, slots=True)
class Kernel:
    ipvs: IPVSKernel
    addresses: AddressKernel
    ipsets: IPSetKernel
    iptables: IptablesKernel
    sysctl: SysctlKernel
    conntrack: ConntrackKernel


class FakeKernel:
    """The in-memory fakes, each under its own type so tests can reach their extra controls."""

    def __init__(self) -> None:
        self.ipvs = FakeIPVS()
        self.addresses = FakeAddresses()
        self.ipsets = FakeIPSets()
        self.iptables = FakeIptables(lambda: self.ipsets.list_sets().keys())
        self.sysctl = FakeSysctl(FRESH_KERNEL_SYSCTLS)
        self.conntrack = FakeConntrack()

    def kernel(self) -> Kernel:
        return Kernel(
            self.ipvs, self.addresses, self.ipsets, self.iptables, self.sysctl, self.conntrack
        )


@contextmanager
def real_kernel(*, ipvs_optional: bool = False) -> Iterator[Kernel]:
    """The machine's kernel; its netlink sockets close when the block ends.

    IPVSUnavailable when the kernel has no IPVS, unless ``ipvs_optional``: then its IPVS is
    an empty table (what cleanup needs, which still has sets, chains and kube-ipvs0 to remove).
    """
    with ExitStack() as stack:
        ipvs: IPVSKernel
        try:
            ipvs = stack.enter_context(NetlinkIPVS())
        except IPVSUnavailable:
            if not ipvs_optional:
                raise
            ipvs = AbsentIPVS()
        addresses = stack.enter_context(NetlinkAddresses())
        ipsets = stack.enter_context(NetlinkIPSets())
        conntrack = stack.enter_context(NetlinkConntrack())
        yield Kernel(ipvs, addresses, ipsets, IptablesRestore(), ProcSysctl(), conntrack)
