"""The machine's kernel and the in-memory fakes, each as one ``Kernel``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ipvsproxy.kernel.addresses import FakeAddresses, NetlinkAddresses
from ipvsproxy.kernel.conntrack import FakeConntrack, NetlinkConntrack
from ipvsproxy.kernel.ipset.fake import FakeIPSets
from ipvsproxy.kernel.ipset.netlink import NetlinkIPSets
from ipvsproxy.kernel.iptables.restore import FakeIptables, IptablesRestore
from ipvsproxy.kernel.ipvs import FakeIPVS, NetlinkIPVS
from ipvsproxy.kernel.protocols import Kernel
from ipvsproxy.kernel.sysctl import FakeSysctl, ProcSysctl


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
