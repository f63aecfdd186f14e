"""The address contract: NetlinkAddresses in the kernel and FakeAddresses in memory agree."""

from __future__ import annotations

import errno
import ipaddress

from ipvsproxy.kernel.protocols import AddressKernel
from ipvsproxy.model import BindAddress, UnbindAddress
from tests.contract.conftest import TEST_INTERFACE

IFF_UP = 0x1

V4 = ipaddress.ip_address("10.96.0.10")
V6 = ipaddress.ip_address("fd00:10:96::10")


def test_ensure_interface_creates_it_once(addresses: AddressKernel) -> None:
    assert not addresses.interface_exists(TEST_INTERFACE)

    addresses.ensure_interface(TEST_INTERFACE)
    addresses.ensure_interface(TEST_INTERFACE)

    assert addresses.interface_exists(TEST_INTERFACE)
    assert addresses.addresses(TEST_INTERFACE) == frozenset()


def test_bind_and_unbind_both_families(addresses: AddressKernel) -> None:
    addresses.ensure_interface(TEST_INTERFACE)

    assert addresses.apply(TEST_INTERFACE, [BindAddress(V4), BindAddress(V6)]) == [None, None]
    assert addresses.addresses(TEST_INTERFACE) == {V4, V6}
    assert addresses.apply(TEST_INTERFACE, [UnbindAddress(V4)]) == [None]
    assert addresses.addresses(TEST_INTERFACE) == {V6}


def test_refusals_are_per_op(addresses: AddressKernel) -> None:
    addresses.ensure_interface(TEST_INTERFACE)
    other = ipaddress.ip_address("10.96.0.11")

    results = addresses.apply(
        TEST_INTERFACE, [BindAddress(V4), BindAddress(V4), UnbindAddress(V6), BindAddress(other)]
    )

    assert [None if r is None else r.errno for r in results] == [
        None,
        errno.EEXIST,
        errno.EADDRNOTAVAIL,
        None,
    ]
    assert addresses.addresses(TEST_INTERFACE) == {V4, other}


def test_delete_interface_removes_it_and_its_addresses(addresses: AddressKernel) -> None:
    addresses.ensure_interface(TEST_INTERFACE)
    addresses.apply(TEST_INTERFACE, [BindAddress(V4)])

    addresses.delete_interface(TEST_INTERFACE)

    assert not addresses.interface_exists(TEST_INTERFACE)
    assert addresses.apply(TEST_INTERFACE, [BindAddress(V4)])[0] is not None


def test_all_addresses_include_every_interface(addresses: AddressKernel) -> None:
    addresses.ensure_interface(TEST_INTERFACE)
    assert V4 not in addresses.all_addresses()

    addresses.apply(TEST_INTERFACE, [BindAddress(V4), BindAddress(V6)])
    assert {V4, V6} <= addresses.all_addresses()

    addresses.apply(TEST_INTERFACE, [UnbindAddress(V4)])
    assert V4 not in addresses.all_addresses()
    assert V6 in addresses.all_addresses()


def test_local_addresses_are_every_other_interfaces(addresses: AddressKernel) -> None:
    """kube-proxy's node addresses: all but the named interface's, read again after a change
    elsewhere (here: the test interface changes and kube-ipvs0 stands aside)."""
    addresses.ensure_interface(TEST_INTERFACE)
    assert V4 not in addresses.local_addresses("kube-ipvs0")

    addresses.apply(TEST_INTERFACE, [BindAddress(V4), BindAddress(V6)])
    assert {V4, V6} <= addresses.local_addresses("kube-ipvs0")
    assert not {V4, V6} & addresses.local_addresses(TEST_INTERFACE)

    addresses.apply(TEST_INTERFACE, [UnbindAddress(V4)])
    assert V4 not in addresses.local_addresses("kube-ipvs0")
    assert V6 in addresses.local_addresses("kube-ipvs0")


def test_a_listing_is_the_kernels_as_of_its_first_step(addresses: AddressKernel) -> None:
    """Every address, each told apart by whether it is on the named interface; what changes
    after the first step is not seen."""
    addresses.ensure_interface(TEST_INTERFACE)
    other = ipaddress.ip_address("10.96.0.11")
    addresses.apply(TEST_INTERFACE, [BindAddress(V4), BindAddress(V6)])
    every, on_interface = addresses.all_addresses(), addresses.addresses(TEST_INTERFACE)

    listing = addresses.listed(TEST_INTERFACE)
    taken = [next(listing)]
    assert addresses.apply(TEST_INTERFACE, [UnbindAddress(V4), BindAddress(other)]) == [None] * 2
    taken += listing

    assert {address for address, _ in taken} == every
    assert {address for address, on in taken if on} == on_interface == {V4, V6}
    assert addresses.addresses(TEST_INTERFACE) == {V6, other}
