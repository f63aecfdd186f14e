"""The machine's kernel as one ``Kernel`` (the in-memory one is ``kernel.testing.FakeKernel``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from ipvsproxy.kernel.addresses import NetlinkAddresses
from ipvsproxy.kernel.conntrack import NetlinkConntrack
from ipvsproxy.kernel.errors import IPVSUnavailable
from ipvsproxy.kernel.ipset.netlink import NetlinkIPSets
from ipvsproxy.kernel.iptables.restore import IptablesRestore
from ipvsproxy.kernel.ipvs import AbsentIPVS, NetlinkIPVS
from ipvsproxy.kernel.protocols import IPVSKernel, Kernel
from ipvsproxy.kernel.sysctl import ProcSysctl


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
