"""The in-memory fakes, together as one ``Kernel``."""

from __future__ import annotations

from ipvsproxy.kernel.protocols import Kernel
from ipvsproxy.kernel.testing.addresses import FakeAddresses
from ipvsproxy.kernel.testing.conntrack import FakeConntrack
from ipvsproxy.kernel.testing.ipsets import FakeIPSets
from ipvsproxy.kernel.testing.iptables import FakeIptables
from ipvsproxy.kernel.testing.ipvs import FakeIPVS
from ipvsproxy.kernel.testing.sysctl import FRESH_KERNEL_SYSCTLS, FakeSysctl


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
