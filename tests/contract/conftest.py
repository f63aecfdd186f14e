"""Contract suites run against the in-memory fakes here and the real kernel inside the lab."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from ipvsproxy.kernel.addresses import FakeAddresses, NetlinkAddresses
from ipvsproxy.kernel.interfaces import AddressKernel, IPVSKernel
from ipvsproxy.kernel.iptables import FakeIptables, IptablesRestore
from ipvsproxy.kernel.iptables_command import CommandNetfilter, binary
from ipvsproxy.kernel.iptables_text import BUILTIN_CHAINS, Tables, parse_save, render_save
from ipvsproxy.kernel.ipvs import FakeIPVS, NetlinkIPVS
from ipvsproxy.model import DeleteVirtualServer, IPFamily

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


# Sets the iptables contract rules match; the kernel refuses rules naming a missing set.
TEST_IPSETS = {IPFamily.IPV4: "IPVSP-TEST", IPFamily.IPV6: "IPVSP-TEST-6"}


def _run(*command: str, stdin: str = "") -> None:
    subprocess.run(command, input=stdin, text=True, check=True, capture_output=True)


@pytest.fixture
def iptables() -> Iterator[IptablesRestore | FakeIptables]:
    if not IN_LAB:
        yield FakeIptables(ipset_names=lambda: set(TEST_IPSETS.values()))
        return
    for family, name in TEST_IPSETS.items():
        inet = "inet" if family is IPFamily.IPV4 else "inet6"
        _run("ipset", "create", name, "hash:ip,port", "family", inet, "-exist")
    kernel = IptablesRestore()
    saved = {family: kernel.netfilter.save(family) for family in IPFamily}
    try:
        yield kernel
    finally:
        # The lab kernel is shared by the whole session: put every table back as it was.
        backend = CommandNetfilter().backend
        for family, text in saved.items():
            # A table never used before is missing from the save: restore it empty.
            tables: Tables = {t: {c: [] for c in BUILTIN_CHAINS[t]} for t in ("nat", "filter")}
            tables.update(parse_save(text))
            _run(binary(backend, family, "restore"), "--wait", stdin=render_save(tables))
        for name in TEST_IPSETS.values():
            _run("ipset", "destroy", name)
