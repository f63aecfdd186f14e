"""NetlinkIPSets and the ipset(8) tool agree on what is in the kernel."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ipvsproxy.kernel.ipset.netlink import NetlinkIPSets
from ipvsproxy.kernel.protocols import as_listed
from ipvsproxy.model import IPFamily, IPSetContent, IPSetSpec
from tests.contract.test_ipsets_contract import EVERY_TYPE
from tests.lab.netns import sh


@pytest.fixture
def ipsets() -> Iterator[NetlinkIPSets]:
    with NetlinkIPSets() as kernel:
        before = set(kernel.list_sets())
        try:
            yield kernel
        finally:
            for name in set(kernel.list_sets()) - before:
                kernel.destroy(name)


def _members(name: str) -> set[str]:
    listing = sh("ipset", "list", name)
    return {line for line in listing.split("Members:\n", 1)[1].splitlines() if line}


@pytest.mark.parametrize("content", EVERY_TYPE, ids=lambda content: content.spec.name)
def test_entries_read_back_as_ipset_lists_them(
    ipsets: NetlinkIPSets, content: IPSetContent
) -> None:
    ipsets.replace(content)

    assert _members(content.spec.name) == ipsets.list_sets()[content.spec.name].entries
    assert _members(content.spec.name) == content.entries


def test_sets_created_by_kube_proxy_are_taken_over(ipsets: NetlinkIPSets) -> None:
    # The arguments kube-proxy's ipset runner passes.
    sh("ipset", "create", "KUBE-6-CLUSTER-IP", "hash:ip,port", "family", "inet6",
       "hashsize", "1024", "maxelem", "65536")  # fmt: skip
    sh("ipset", "create", "KUBE-NODE-PORT-TCP", "bitmap:port", "range", "0-65535")
    sh("ipset", "add", "KUBE-6-CLUSTER-IP", "fd00:10:96::1,tcp:443")
    cluster_ip = IPSetSpec("KUBE-6-CLUSTER-IP", "hash:ip,port", IPFamily.IPV6)
    node_port = IPSetSpec("KUBE-NODE-PORT-TCP", "bitmap:port", IPFamily.IPV4)

    ipsets.create(cluster_ip)
    ipsets.create(node_port)
    ipsets.replace(IPSetContent(node_port, frozenset({"30080"})))

    listed = ipsets.list_sets()
    assert listed["KUBE-6-CLUSTER-IP"] == IPSetContent(
        as_listed(cluster_ip), frozenset({"fd00:10:96::1,tcp:443"})
    )
    assert listed["KUBE-NODE-PORT-TCP"].entries == {"30080"}


def test_a_foreign_set_of_another_kind_is_listed_and_left_alone(ipsets: NetlinkIPSets) -> None:
    sh("ipset", "create", "SOMEONE-ELSES-NETS", "hash:net", "comment")
    sh("ipset", "add", "SOMEONE-ELSES-NETS", "192.0.2.0/24", "comment", "allow list")
    before = sh("ipset", "save", "SOMEONE-ELSES-NETS")

    for content in EVERY_TYPE:
        ipsets.replace(content)
        ipsets.destroy(content.spec.name)

    assert ipsets.list_sets()["SOMEONE-ELSES-NETS"].entries == {"192.0.2.0/24"}
    assert sh("ipset", "save", "SOMEONE-ELSES-NETS") == before
