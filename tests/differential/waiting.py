"""Waiting, without timers, until a proxy has synced everything written before a marker."""

from __future__ import annotations

import ipaddress
import time

from ipvsproxy.kernel.ipvs import NetlinkIPVS
from ipvsproxy.model import TransportProtocol, VirtualServerKey
from tests.differential.cluster import Marker
from tests.differential.proxies import Proxy
from tests.lab.netns import inside

POLL_INTERVAL = 0.3
# A bound for a hung proxy, never a timer: kube-proxy's sync takes many seconds in the lab.
SYNC_TIMEOUT = 300.0


class KernelProbe:
    """The IPVS table of one namespace, through a netlink socket opened inside it."""

    def __init__(self, namespace: str) -> None:
        with inside(namespace):
            self._ipvs = NetlinkIPVS()

    def close(self) -> None:
        self._ipvs.close()

    def holds(self, marker: Marker) -> bool:
        for address in marker.cluster_ips:
            key = VirtualServerKey(
                TransportProtocol.TCP, ipaddress.ip_address(address), marker.port
            )
            found = self._ipvs.virtual_server(key)
            if found is None or not any(real.port == marker.port for real in found.real_servers):
                return False
        return True


def wait_synced(proxy: Proxy, probe: KernelProbe, marker: Marker) -> float:
    """Until the kernel holds the marker and every sync begun by then has ended: the sync
    that wrote the marker had seen every object written before it."""
    deadline = time.monotonic() + SYNC_TIMEOUT
    begun: dict[str, int] | None = None
    while time.monotonic() < deadline:
        proxy.check_alive()
        if begun is None:
            if probe.holds(marker):
                begun = proxy.syncs_begun()
                continue
        else:
            ended = proxy.syncs_ended()
            if all(ended.get(family, 0) >= count for family, count in begun.items()):
                return time.monotonic()
        time.sleep(POLL_INTERVAL)
    raise TimeoutError(
        f"{proxy.name} did not sync marker {marker} within {SYNC_TIMEOUT:g} s:\n{proxy.log_tail()}"
    )
