"""The machine's kernel and the in-memory fakes, each as one ``Kernel``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from ipvsproxy.kernel.addresses import FakeAddresses, NetlinkAddresses
from ipvsproxy.kernel.conntrack import FakeConntrack, NetlinkConntrack
from ipvsproxy.kernel.errors import IPVSUnavailable
from ipvsproxy.kernel.ipset.fake import FakeIPSets
from ipvsproxy.kernel.ipset.netlink import NetlinkIPSets
from ipvsproxy.kernel.iptables.restore import FakeIptables, IptablesRestore
from ipvsproxy.kernel.ipvs import AbsentIPVS, FakeIPVS, NetlinkIPVS
from ipvsproxy.kernel.protocols import IPVSKernel, Kernel
from ipvsproxy.kernel.sysctl import FRESH_KERNEL_SYSCTLS, FakeSysctl, ProcSysctl


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
