"""kube-ipvs0 as the kernel holds it: a dummy link left DOWN without a transmit queue (as
kube-proxy makes it), IPv6 addresses without DAD."""

from __future__ import annotations

import ipaddress
import socket

from pyroute2 import IPRoute

from ipvsproxy.kernel.addresses import IFA_F_NODAD, NetlinkAddresses
from ipvsproxy.model import BindAddress

TEST_INTERFACE = "ipvsp-test0"
IFF_UP = 0x1
V6 = ipaddress.ip_address("fd00:10:96::10")


def test_interface_is_a_down_dummy_without_queue_and_ipv6_skips_dad() -> None:
    addresses = NetlinkAddresses()
    try:
        _check_link_and_address(addresses)
    finally:
        addresses.delete_interface(TEST_INTERFACE)
        addresses.close()


def _check_link_and_address(addresses: NetlinkAddresses) -> None:
    addresses.ensure_interface(TEST_INTERFACE)
    addresses.apply(TEST_INTERFACE, [BindAddress(V6)])

    with IPRoute() as route:
        (link,) = route.get_links(ifname=TEST_INTERFACE)
        (address,) = route.get_addr(index=link["index"], family=socket.AF_INET6)

    assert link.get_attr("IFLA_LINKINFO").get_attr("IFLA_INFO_KIND") == "dummy"
    assert not link["flags"] & IFF_UP
    assert link.get_attr("IFLA_TXQLEN") == 0
    assert address["prefixlen"] == 128
    assert (address.get_attr("IFA_FLAGS") or address["flags"]) & IFA_F_NODAD
