"""In-memory fakes of the kernel's interfaces, for tests only (as kube-proxy's ``testing``
packages): each refuses what the kernel refuses, with its errnos, and passes the same contract
tests (``tests/contract``) as the real implementation. No production module imports this
package; an import-linter contract in pyproject.toml says so.
"""

from ipvsproxy.kernel.testing.addresses import FakeAddresses
from ipvsproxy.kernel.testing.conntrack import FakeConntrack
from ipvsproxy.kernel.testing.ipsets import FakeIPSets
from ipvsproxy.kernel.testing.iptables import FakeIptables
from ipvsproxy.kernel.testing.ipvs import FakeIPVS
from ipvsproxy.kernel.testing.kernel import FakeKernel
from ipvsproxy.kernel.testing.sysctl import FRESH_KERNEL_SYSCTLS, FakeSysctl

__all__ = [
    "FRESH_KERNEL_SYSCTLS",
    "FakeAddresses",
    "FakeConntrack",
    "FakeIPSets",
    "FakeIPVS",
    "FakeIptables",
    "FakeKernel",
    "FakeSysctl",
]
