"""Contract suites run against the in-memory fakes here and the real kernel inside the lab."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator

import pytest

from ipvsproxy.kernel.addresses import NetlinkAddresses
from ipvsproxy.kernel.ipset.netlink import NetlinkIPSets
from ipvsproxy.kernel.iptables.backend import detect_backend
from ipvsproxy.kernel.iptables.command import binary
from ipvsproxy.kernel.iptables.restore import IptablesRestore
from ipvsproxy.kernel.iptables.text import BUILTIN_CHAINS, Tables, parse_save, render_save
from ipvsproxy.kernel.ipvs import NetlinkIPVS
from ipvsproxy.kernel.protocols import AddressKernel, IPSetKernel, IPVSKernel
from ipvsproxy.kernel.testing import (
    FakeAddresses,
    FakeConntrack,
    FakeIPSets,
    FakeIptables,
    FakeIPVS,
)
from ipvsproxy.model import DeleteVirtualServer, IPFamily, IPSetContent
from tests.lab.conntrack import SeededConntrack

IN_LAB = os.environ.get("IPVSPROXY_LAB") == "1"
# Not kube-ipvs0, so the suite never disturbs a proxy running in the same kernel.
TEST_INTERFACE = "ipvsp-test0"
# A chain of our own whose rules hold references to sets.
HOLD_CHAIN = "IPVSP-TEST-HOLD"


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
def ipsets() -> Iterator[IPSetKernel]:
    if not IN_LAB:
        yield FakeIPSets()
        return
    kernel = NetlinkIPSets()
    before = set(kernel.list_sets())
    try:
        yield kernel
    finally:
        for name in set(kernel.list_sets()) - before:
            kernel.destroy(name)
        kernel.close()


@pytest.fixture
def conntrack() -> Iterator[FakeConntrack | SeededConntrack]:
    if not IN_LAB:
        yield FakeConntrack()
        return
    kernel = SeededConntrack()
    before = kernel.flows()
    try:
        yield kernel
    finally:
        # Seeded flows would live on for minutes: delete what this test left.
        kernel.delete_entries([flow.target() for flow in kernel.flows() - before])
        kernel.close()


@pytest.fixture
def hold(ipsets: IPSetKernel) -> Iterator[Callable[[str], None]]:
    """Make a set in use: an iptables rule that matches on it (held in memory by the fake)."""
    if isinstance(ipsets, FakeIPSets):
        yield ipsets.hold
        return
    iptables = shutil.which("iptables-legacy") or "iptables"
    chain = ("-t", "filter", "-w")
    subprocess.run([iptables, *chain, "-N", HOLD_CHAIN], check=True)

    def match_on(name: str) -> None:
        rule = ["-A", HOLD_CHAIN, "-m", "set", "--match-set", name, "dst"]
        subprocess.run([iptables, *chain, *rule], check=True)

    try:
        yield match_on
    finally:
        subprocess.run([iptables, *chain, "-F", HOLD_CHAIN], check=True)
        subprocess.run([iptables, *chain, "-X", HOLD_CHAIN], check=True)


@pytest.fixture
def plant(ipsets: IPSetKernel) -> Callable[[IPSetContent], None]:
    """Make a set as someone else would, creation options included (``ipset create NAME
    TYPE family inet maxelem 1024 counters``), which ``create`` never makes."""
    if isinstance(ipsets, FakeIPSets):
        return ipsets.plant

    def create(content: IPSetContent) -> None:
        spec = content.spec
        family = "inet" if spec.family is IPFamily.IPV4 else "inet6"
        options = [word for option in spec.options for word in option.split()]
        _run("ipset", "create", spec.name, spec.set_type, "family", family, *options)
        for entry in sorted(content.entries):
            _run("ipset", "add", spec.name, entry)

    return create


# Sets the iptables contract rules match; the kernel refuses rules naming a missing set.
TEST_IPSETS = {IPFamily.IPV4: "IPVSP-TEST", IPFamily.IPV6: "IPVSP-TEST-6"}


def _run(*command: str, stdin: str = "") -> None:
    subprocess.run(command, input=stdin, text=True, check=True, capture_output=True)


@pytest.fixture(scope="session")
def iptables_backend() -> Iterator[str]:
    """The backend, and the sets the contract's rules match, once per lab boot: a process start
    is the dearest thing inside UML and a detection takes six. Detection itself is proven in
    tests/kernel/test_iptables_kernel.py."""
    for family, name in TEST_IPSETS.items():
        inet = "inet" if family is IPFamily.IPV4 else "inet6"
        _run("ipset", "create", name, "hash:ip,port", "family", inet, "-exist")
    try:
        yield detect_backend()
    finally:
        for name in TEST_IPSETS.values():
            _run("ipset", "destroy", name)


@pytest.fixture
def iptables(request: pytest.FixtureRequest) -> Iterator[IptablesRestore | FakeIptables]:
    if not IN_LAB:
        yield FakeIptables(ipset_names=lambda: set(TEST_IPSETS.values()))
        return
    backend: str = request.getfixturevalue("iptables_backend")
    kernel = IptablesRestore(backend)
    saved = {family: kernel.netfilter.save(family) for family in IPFamily}
    try:
        yield kernel
    finally:
        # The lab kernel is shared by the whole session: put every table back as it was.
        for family, text in saved.items():
            # A table never used before is missing from the save: restore it empty.
            tables: Tables = {t: {c: [] for c in BUILTIN_CHAINS[t]} for t in ("nat", "filter")}
            tables.update(parse_save(text))
            _run(binary(backend, family, "restore"), "--wait", stdin=render_save(tables))
