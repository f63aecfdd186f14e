"""Contract suites run against the in-memory fakes here and the real kernel inside the lab."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest

from ipvsproxy.kernel.addresses import FakeAddresses, NetlinkAddresses
from ipvsproxy.kernel.conntrack import FakeConntrack
from ipvsproxy.kernel.interfaces import AddressKernel, IPVSKernel
from ipvsproxy.kernel.ipsets import FakeIPSets
from ipvsproxy.kernel.ipvs import FakeIPVS, NetlinkIPVS
from ipvsproxy.model import DeleteVirtualServer

IN_LAB = os.environ.get("IPVSPROXY_LAB") == "1"
# Not kube-ipvs0, so the suite never disturbs a proxy running in the same kernel.
TEST_INTERFACE = "ipvsp-test0"


@pytest.fixture
def ipvs() -> Iterator[IPVSKernel]:
    if not IN_LAB:
        yield FakeIPVS()
        return
    kernel = NetlinkIPVS()
    before = set(kernel.dump())
    try:
        yield kernel
    finally:
        # The lab kernel is shared by the whole session: remove what this test made.
        leftovers = set(kernel.dump()) - before
        kernel.apply([DeleteVirtualServer(key) for key in leftovers])
        kernel.close()


@pytest.fixture
def addresses() -> Iterator[AddressKernel]:
    if not IN_LAB:
        yield FakeAddresses()
        return
    kernel = NetlinkAddresses()
    try:
        yield kernel
    finally:
        kernel.delete_interface(TEST_INTERFACE)
        kernel.close()


@pytest.fixture
def ipsets() -> Iterator[FakeIPSets]:
    yield FakeIPSets()


@pytest.fixture
def conntrack() -> Iterator[FakeConntrack]:
    yield FakeConntrack()


@pytest.fixture
def hold(ipsets: FakeIPSets) -> Callable[[str], None]:
    """Make a set in use, as an iptables rule that matches on it does."""
    return ipsets.hold
