"""Our chains over netfilter tables in memory, which read the same restore text as the kernel."""

from __future__ import annotations

from collections.abc import Callable, Collection

from ipvsproxy.kernel.iptables.restore import Iptables
from ipvsproxy.kernel.testing.netfilter import MemoryNetfilter


class FakeIptables(Iptables):
    """In-memory tables; ``ipset_names`` (when given) lists the sets rules may match."""

    def __init__(self, ipset_names: Callable[[], Collection[str]] | None = None) -> None:
        super().__init__(MemoryNetfilter(ipset_names))
