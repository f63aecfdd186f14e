"""On the real kernel: `ipvsproxy cleanup` removes what a sync of the example made, only that."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from ipvsproxy.cli import main
from ipvsproxy.cluster.source import load_snapshot
from ipvsproxy.kernel.addresses import NetlinkAddresses
from ipvsproxy.kernel.ipset.netlink import NetlinkIPSets
from ipvsproxy.kernel.iptables.restore import IptablesRestore
from ipvsproxy.kernel.ipvs import NetlinkIPVS
from ipvsproxy.model import (
    DUMMY_INTERFACE,
    AddVirtualServer,
    BindAddress,
    DeleteVirtualServer,
    IPFamily,
    IPSetSpec,
    TransportProtocol,
    VirtualServer,
    VirtualServerKey,
)
from ipvsproxy.reconcile.cleanup import remove_leftovers
from ipvsproxy.reconcile.ipvs_plan import owned_addresses, plan_ipvs
from ipvsproxy.translate import Settings, translate

# The example's node-a address, on a dummy of the test's own so NodePorts are local.
NODE_INTERFACE = "ipvsp-node0"
NODE_IP = ipaddress.ip_address("192.168.10.11")
FOREIGN_ON_NODE = VirtualServerKey(TransportProtocol.TCP, NODE_IP, 8080)
FOREIGN_ELSEWHERE = VirtualServerKey(TransportProtocol.TCP, ipaddress.ip_address("172.16.0.1"), 80)
FOREIGN_SET = "ipvsp-allowlist"
FOREIGN_CHAIN = "IPVSP-FOREIGN"
FOREIGN_RULES = f"""*filter
:{FOREIGN_CHAIN} - [0:0]
-A INPUT -j {FOREIGN_CHAIN}
-A {FOREIGN_CHAIN} -s 10.0.0.1/32 -j ACCEPT
COMMIT
"""
FOREIGN_REMOVAL = f"""*filter
-D INPUT -j {FOREIGN_CHAIN}
-F {FOREIGN_CHAIN}
-X {FOREIGN_CHAIN}
COMMIT
"""


@pytest.fixture
def synced_node() -> Iterator[tuple[NetlinkIPVS, NetlinkAddresses, NetlinkIPSets, IptablesRestore]]:
    """The kernel as a sync of the example leaves it, plus someone else's objects."""
    snapshot, _ = load_snapshot(Path("examples/cluster.yaml"), "node-a")
    desired = translate(snapshot, Settings())
    ipvs, addresses, ipsets, iptables = (
        NetlinkIPVS(),
        NetlinkAddresses(),
        NetlinkIPSets(),
        IptablesRestore(),
    )
    try:
        addresses.ensure_interface(NODE_INTERFACE)
        assert addresses.apply(NODE_INTERFACE, [BindAddress(NODE_IP)]) == [None]
        addresses.ensure_interface(DUMMY_INTERFACE)
        binds = [BindAddress(address) for address in desired.bound_addresses]
        assert addresses.apply(DUMMY_INTERFACE, binds) == [None] * len(binds)
        ops = [
            *plan_ipvs(desired, {}, owned_addresses(desired, ())).ops,
            AddVirtualServer(VirtualServer(FOREIGN_ON_NODE)),
            AddVirtualServer(VirtualServer(FOREIGN_ELSEWHERE)),
        ]
        assert ipvs.apply(ops) == [None] * len(ops)
        for content in desired.ipsets.values():
            ipsets.replace(content)
        ipsets.create(IPSetSpec(FOREIGN_SET, "hash:ip"))
        for ruleset in desired.iptables:
            iptables.restore(ruleset)
        iptables.netfilter.restore(IPFamily.IPV4, FOREIGN_RULES)
        yield ipvs, addresses, ipsets, iptables
    finally:
        # Whatever the test left of ours, then the foreign objects the fixture made.
        remove_leftovers(ipvs, addresses, ipsets, iptables)
        ipvs.apply([DeleteVirtualServer(FOREIGN_ON_NODE), DeleteVirtualServer(FOREIGN_ELSEWHERE)])
        if FOREIGN_CHAIN in iptables.netfilter.save(IPFamily.IPV4):
            iptables.netfilter.restore(IPFamily.IPV4, FOREIGN_REMOVAL)
        if FOREIGN_SET in ipsets.list_sets():
            ipsets.destroy(FOREIGN_SET)
        addresses.delete_interface(NODE_INTERFACE)
        for kernel in (ipvs, addresses, ipsets):
            kernel.close()


def test_cleanup_removes_ours_leaves_foreign_and_is_idempotent(
    synced_node: tuple[NetlinkIPVS, NetlinkAddresses, NetlinkIPSets, IptablesRestore],
) -> None:
    ipvs, addresses, ipsets, iptables = synced_node

    first = CliRunner().invoke(main, ["cleanup"])

    assert first.exit_code == 0, first.output
    removed = first.stdout.splitlines()
    assert sum("removed virtual server" in line for line in removed) == 8
    assert removed[-1] == "removed interface kube-ipvs0"
    assert set(ipvs.dump()) == {FOREIGN_ON_NODE, FOREIGN_ELSEWHERE}
    assert not addresses.interface_exists(DUMMY_INTERFACE)
    assert addresses.addresses(NODE_INTERFACE) == {NODE_IP}
    assert not [name for name in ipsets.list_sets() if name.startswith("KUBE-")]
    assert FOREIGN_SET in ipsets.list_sets()
    for family in IPFamily:
        assert iptables.our_chains(family) == {}
    assert f"-A INPUT -j {FOREIGN_CHAIN}" in iptables.netfilter.save(IPFamily.IPV4)

    second = CliRunner().invoke(main, ["cleanup"])

    assert (second.exit_code, second.output) == (0, "")
