"""The six kernel interfaces as one object, so callers pass the kernel around whole."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from ipvsproxy.kernel.addresses import FakeAddresses, NetlinkAddresses
from ipvsproxy.kernel.conntrack import FakeConntrack, NetlinkConntrack
from ipvsproxy.kernel.ipset.netlink import FakeIPSets, NetlinkIPSets
from ipvsproxy.kernel.iptables.restore import FakeIptables, IptablesRestore
from ipvsproxy.kernel.ipvs import FakeIPVS, NetlinkIPVS
from ipvsproxy.kernel.protocols import (
    AddressKernel,
    ConntrackKernel,
    IPSetKernel,
    IptablesKernel,
    IPVSKernel,
    SysctlKernel,
)
from ipvsproxy.kernel.sysctl import FakeSysctl, ProcSysctl


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
        self.sysctl = FakeSysctl()
        self.conntrack = FakeConntrack()

    def kernel(self) -> Kernel:
        return Kernel(
            self.ipvs, self.addresses, self.ipsets, self.iptables, self.sysctl, self.conntrack
        )


@contextmanager
def real_kernel() -> Iterator[Kernel]:
    """The machine's kernel; its netlink sockets close when the block ends."""
    with (
        NetlinkIPVS() as ipvs,
        NetlinkAddresses() as addresses,
        NetlinkIPSets() as ipsets,
        NetlinkConntrack() as conntrack,
    ):
        yield Kernel(ipvs, addresses, ipsets, IptablesRestore(), ProcSysctl(), conntrack)
