"""UDP flows through an IPVS service land in conntrack, and one endpoint's can be deleted."""

from __future__ import annotations

import ipaddress
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ipvsproxy.kernel.addresses import NetlinkAddresses
from ipvsproxy.kernel.ipvs import NetlinkIPVS
from ipvsproxy.model import (
    AddRealServer,
    AddVirtualServer,
    BindAddress,
    DeleteVirtualServer,
    IPVSOp,
    RealServer,
    RealServerKey,
    TransportProtocol,
    VirtualServer,
    VirtualServerKey,
)
from tests.lab.conntrack import SeededConntrack
from tests.lab.netns import Client, Node, Pod, sh, sysctl

SERVICE_IP = {4: "10.96.0.53", 6: "fd00:10:96::53"}
SERVICE_INTERFACE = "ipvsp-ct0"
CONNTRACK_CHAIN = "IPVSP-TEST-CT"


@pytest.fixture
def conntrack() -> Iterator[SeededConntrack]:
    """Conntrack on, as on a node: the kernel tracks only once a rule needs it."""
    sysctl("net.ipv4.vs.conntrack", "1")
    commands = [shutil.which(f"{name}-legacy") or name for name in ("iptables", "ip6tables")]
    for command in commands:
        sh(command, "-w", "-N", CONNTRACK_CHAIN)
        sh(command, "-w", "-A", CONNTRACK_CHAIN, "-m", "conntrack", "--ctstate", "NEW")
    # A loaded lab can take longer than conntrack's 30 s for a UDP flow between the first
    # request and the last look; the flows this test counts must outlive it.
    timeout = Path("/proc/sys/net/netfilter/nf_conntrack_udp_timeout")
    kept_timeout = timeout.read_text().strip()
    sysctl("net.netfilter.nf_conntrack_udp_timeout", "600")
    try:
        with SeededConntrack() as kernel:
            yield kernel
    finally:
        sysctl("net.netfilter.nf_conntrack_udp_timeout", kept_timeout)
        for command in commands:
            sh(command, "-w", "-F", CONNTRACK_CHAIN)
            sh(command, "-w", "-X", CONNTRACK_CHAIN)


@pytest.mark.parametrize("family", [4, 6])
def test_deleting_one_endpoints_flows_leaves_the_others(
    family: int,
    node: Node,
    pod: Callable[[str], Pod],
    client: Callable[[Pod | None], Client],
    conntrack: SeededConntrack,
) -> None:
    backends = [pod("dns-a"), pod("dns-b")]
    caller = pod("caller")
    service = VirtualServerKey(TransportProtocol.UDP, ipaddress.ip_address(SERVICE_IP[family]), 53)
    endpoints = {
        backend.name: RealServerKey(backend.ipv4 if family == 4 else backend.ipv6, 8080)
        for backend in backends
    }
    with NetlinkAddresses() as addresses, NetlinkIPVS() as ipvs:
        addresses.ensure_interface(SERVICE_INTERFACE)
        assert addresses.apply(SERVICE_INTERFACE, [BindAddress(service.address)]) == [None]
        ops: list[IPVSOp] = [AddVirtualServer(VirtualServer(service))]
        ops += [AddRealServer(service, RealServer(key)) for key in endpoints.values()]
        assert ipvs.apply(ops) == [None] * len(ops)
        try:
            # Each request from a fresh socket is a new flow; rr spreads them over both pods.
            answers = client(caller).udp_names(str(service.address), 53, count=6)
            assert answers == {"dns-a": 3, "dns-b": 3}
            to_service = {flow for flow in conntrack.flows() if flow.service == service}
            assert {flow.endpoint for flow in to_service} == set(endpoints.values())
            staying = {flow for flow in to_service if flow.endpoint == endpoints["dns-b"]}

            deleted = conntrack.delete_entries([(service, endpoints["dns-a"])])

            assert deleted == [3]
            after = {flow for flow in conntrack.flows() if flow.service == service}
            assert after == staying
        finally:
            ipvs.apply([DeleteVirtualServer(service)])
            addresses.delete_interface(SERVICE_INTERFACE)
