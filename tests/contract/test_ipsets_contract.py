"""The ipset contract: NetlinkIPSets in the kernel and FakeIPSets in memory agree."""

from __future__ import annotations

import errno
from collections.abc import Callable

import pytest

from ipvsproxy.kernel.errors import IPSetError
from ipvsproxy.kernel.ipset.netlink import NetlinkIPSets
from ipvsproxy.kernel.ipset.refusals import IPSET_MESSAGES
from ipvsproxy.kernel.protocols import IPSetKernel, as_listed, merged_sets
from ipvsproxy.model import BatchResult, IPFamily, IPSetContent, IPSetSpec

V4, V6 = IPFamily.IPV4, IPFamily.IPV6
IPSET_ERR_BUSY = next(code for code, text in IPSET_MESSAGES.items() if "in use" in text)

# Every type kube-proxy's IPVS mode uses, in both families, with entries as translate writes them.
EVERY_TYPE = [
    IPSetContent(IPSetSpec("IPVSP-T-IPPORT", "hash:ip,port", V4), frozenset({
        "10.96.0.10,tcp:80", "10.96.0.10,udp:53", "10.96.0.11,sctp:9000",
    })),
    IPSetContent(IPSetSpec("IPVSP-T-6-IPPORT", "hash:ip,port", V6), frozenset({
        "fd00::1,udp:53", "fd00:10:96::a,tcp:443",
    })),
    IPSetContent(IPSetSpec("IPVSP-T-IPPORTIP", "hash:ip,port,ip", V4), frozenset({
        "10.244.0.5,tcp:8080,10.244.0.5",
    })),
    IPSetContent(IPSetSpec("IPVSP-T-6-IPPORTIP", "hash:ip,port,ip", V6), frozenset({
        "fd00:10:244::5,udp:8080,fd00:10:244::5",
    })),
    IPSetContent(IPSetSpec("IPVSP-T-IPPORTNET", "hash:ip,port,net", V4), frozenset({
        "10.96.0.10,tcp:80,10.0.0.0/8", "10.96.0.10,tcp:80,192.168.1.7",
    })),
    IPSetContent(IPSetSpec("IPVSP-T-6-IPPORTNET", "hash:ip,port,net", V6), frozenset({
        "fd00::1,tcp:80,fd00:10::/32", "fd00::1,tcp:80,fd00::7",
    })),
    IPSetContent(IPSetSpec("IPVSP-T-PORT", "bitmap:port", V4), frozenset({"30080", "0", "65535"})),
    IPSetContent(IPSetSpec("IPVSP-T-6-PORT", "bitmap:port", V6), frozenset({"30081"})),
    IPSetContent(IPSetSpec("IPVSP-T-IP", "hash:ip", V4), frozenset({"10.0.0.1"})),
    IPSetContent(IPSetSpec("IPVSP-T-6-IP", "hash:ip", V6), frozenset({"fd00::1"})),
]  # fmt: skip

CLUSTER_IP = IPSetSpec("IPVSP-T-CLUSTER-IP", "hash:ip,port", V4, "cluster ip + port")
FOREIGN = IPSetContent(
    IPSetSpec("SOMEONE-ELSES", "hash:ip", V4), frozenset({"192.0.2.1", "192.0.2.2"})
)


def _codes(results: BatchResult) -> list[int | None]:
    return [result.errno if result else None for result in results]


@pytest.mark.parametrize("content", EVERY_TYPE, ids=lambda content: content.spec.name)
def test_every_type_reads_back_as_written(ipsets: IPSetKernel, content: IPSetContent) -> None:
    ipsets.create(content.spec)

    assert ipsets.add(content.spec.name, sorted(content.entries)) == [None] * len(content.entries)
    assert ipsets.list_sets()[content.spec.name] == IPSetContent(
        as_listed(content.spec), content.entries
    )


def test_create_is_idempotent_for_the_same_type_only(ipsets: IPSetKernel) -> None:
    ipsets.create(CLUSTER_IP)
    ipsets.add(CLUSTER_IP.name, ["10.96.0.10,tcp:80"])

    ipsets.create(CLUSTER_IP)
    with pytest.raises(IPSetError) as refused:
        ipsets.create(IPSetSpec(CLUSTER_IP.name, "hash:ip,port,ip", V4))
    with pytest.raises(IPSetError):
        ipsets.create(IPSetSpec(CLUSTER_IP.name, "hash:ip,port", V6))

    assert refused.value.errno == errno.EEXIST
    assert ipsets.list_sets()[CLUSTER_IP.name].entries == {"10.96.0.10,tcp:80"}


@pytest.mark.parametrize(
    "spec",
    [
        IPSetSpec("IPVSP-T-NAME-LONGER-THAN-31-CHARS", "hash:ip", V4),
        IPSetSpec("IPVSP-T-LIST", "list:set", V4),
    ],
)
def test_create_refuses_what_it_cannot_make(ipsets: IPSetKernel, spec: IPSetSpec) -> None:
    with pytest.raises(IPSetError, match=spec.name[:20]):
        ipsets.create(spec)

    assert spec.name not in ipsets.list_sets()


def test_one_bad_entry_never_stops_the_rest(ipsets: IPSetKernel) -> None:
    ipsets.create(CLUSTER_IP)

    results = ipsets.add(
        CLUSTER_IP.name,
        ["10.96.0.10,tcp:80", "not-an-entry", "fd00::1,tcp:80", "10.96.0.11,icmp:1",
         "10.96.0.12,tcp:65536", "10.96.0.10,tcp:80", "10.96.0.13,udp:53"],
    )  # fmt: skip

    assert _codes(results) == [None, errno.EINVAL, errno.EINVAL, errno.EINVAL, errno.EINVAL, None,
                               None]  # fmt: skip
    refused = results[1]
    assert refused is not None
    assert "not-an-entry" in refused.message
    assert ipsets.list_sets()[CLUSTER_IP.name].entries == {"10.96.0.10,tcp:80", "10.96.0.13,udp:53"}


def test_delete_is_per_entry_and_ignores_missing_entries(ipsets: IPSetKernel) -> None:
    ipsets.create(CLUSTER_IP)
    ipsets.add(CLUSTER_IP.name, ["10.96.0.10,tcp:80", "10.96.0.11,tcp:80"])

    results = ipsets.delete(CLUSTER_IP.name, ["10.96.0.10,tcp:80", "10.96.0.99,tcp:80", "bad"])

    assert _codes(results) == [None, None, errno.EINVAL]
    assert ipsets.list_sets()[CLUSTER_IP.name].entries == {"10.96.0.11,tcp:80"}


def test_entries_of_a_missing_set_are_refused_one_by_one(ipsets: IPSetKernel) -> None:
    assert _codes(ipsets.add("IPVSP-T-MISSING", ["10.0.0.1", "10.0.0.2"])) == [errno.ENOENT] * 2
    assert _codes(ipsets.delete("IPVSP-T-MISSING", ["10.0.0.1"])) == [errno.ENOENT]


def test_many_entries_in_one_call(ipsets: IPSetKernel) -> None:
    entries = [f"10.96.{i // 250}.{i % 250 + 1},tcp:{1000 + i}" for i in range(2000)]
    ipsets.create(CLUSTER_IP)

    assert ipsets.add(CLUSTER_IP.name, entries) == [None] * len(entries)
    assert ipsets.list_sets()[CLUSTER_IP.name].entries == set(entries)
    assert ipsets.delete(CLUSTER_IP.name, entries[::2]) == [None] * 1000
    assert ipsets.list_sets()[CLUSTER_IP.name].entries == set(entries[1::2])


def test_a_listing_in_parts_is_the_kernels_as_of_its_first_step(ipsets: IPSetKernel) -> None:
    """Parts join into ``list_sets``, each set's in a row; what changes after the first part
    is not seen. The kernel sends a set of 2,000 entries in several messages, each a part."""
    entries = [f"10.96.{i // 250}.{i % 250 + 1},tcp:{1000 + i}" for i in range(2000)]
    small = EVERY_TYPE[0]
    ipsets.create(CLUSTER_IP)
    ipsets.add(CLUSTER_IP.name, entries)
    ipsets.replace(small)
    before = ipsets.list_sets()

    listing = ipsets.listed()
    parts = [next(listing)]
    assert ipsets.delete(CLUSTER_IP.name, entries[:10]) == [None] * 10
    ipsets.destroy(small.spec.name)
    ipsets.create(IPSetSpec("IPVSP-T-LATER", "hash:ip", V4))
    parts += listing

    assert merged_sets(parts) == before
    names = [part.spec.name for part in parts]
    # Each set's parts in a row: a set left is never come back to.
    runs = [name for index, name in enumerate(names) if not index or names[index - 1] != name]
    assert len(runs) == len(set(runs))
    if isinstance(ipsets, NetlinkIPSets):
        assert names.count(CLUSTER_IP.name) > 1
    assert ipsets.list_sets()[CLUSTER_IP.name].entries == set(entries[10:])


def test_replace_makes_the_set_hold_exactly_the_content(ipsets: IPSetKernel) -> None:
    ipsets.create(CLUSTER_IP)
    ipsets.add(CLUSTER_IP.name, ["10.96.0.10,tcp:80", "10.96.0.11,tcp:80"])
    wanted = IPSetContent(CLUSTER_IP, frozenset({"10.96.0.11,tcp:80", "10.96.0.12,udp:53"}))
    before = set(ipsets.list_sets())

    ipsets.replace(wanted)

    assert ipsets.list_sets()[CLUSTER_IP.name] == IPSetContent(
        as_listed(CLUSTER_IP), wanted.entries
    )
    assert set(ipsets.list_sets()) == before, "the temporary set is gone"


def test_replace_creates_a_missing_set(ipsets: IPSetKernel) -> None:
    for content in EVERY_TYPE:
        ipsets.replace(content)

    listed = ipsets.list_sets()
    for content in EVERY_TYPE:
        assert listed[content.spec.name] == IPSetContent(as_listed(content.spec), content.entries)


def test_replace_with_a_bad_entry_leaves_the_set_as_it_was(ipsets: IPSetKernel) -> None:
    ipsets.create(CLUSTER_IP)
    ipsets.add(CLUSTER_IP.name, ["10.96.0.10,tcp:80"])
    before = ipsets.list_sets()

    with pytest.raises(IPSetError, match=r"10\.96\.0\.300"):
        ipsets.replace(IPSetContent(CLUSTER_IP, frozenset({"10.96.0.11,tcp:80", "10.96.0.300"})))

    assert ipsets.list_sets() == before


def test_replace_refuses_another_type(ipsets: IPSetKernel) -> None:
    ipsets.create(CLUSTER_IP)

    with pytest.raises(IPSetError):
        ipsets.replace(IPSetContent(IPSetSpec(CLUSTER_IP.name, "bitmap:port"), frozenset({"80"})))

    assert ipsets.list_sets()[CLUSTER_IP.name].spec == as_listed(CLUSTER_IP)


@pytest.mark.parametrize(
    "options",
    [("maxelem 1024",), ("timeout 600",), ("counters", "comment")],
    ids=["maxelem", "timeout", "extensions"],
)
def test_a_set_with_other_options_is_listed_so_and_swapped_for_ours_in_use(
    ipsets: IPSetKernel,
    plant: Callable[[IPSetContent], None],
    hold: Callable[[str], None],
    options: tuple[str, ...],
) -> None:
    planted = IPSetSpec(CLUSTER_IP.name, CLUSTER_IP.set_type, V4, options=options)
    plant(IPSetContent(planted, frozenset({"10.96.0.10,tcp:80"})))
    hold(CLUSTER_IP.name)
    assert ipsets.list_sets()[CLUSTER_IP.name].spec == planted

    ipsets.replace(IPSetContent(CLUSTER_IP, frozenset({"10.96.0.11,tcp:80"})))

    assert ipsets.list_sets()[CLUSTER_IP.name] == IPSetContent(
        as_listed(CLUSTER_IP), frozenset({"10.96.0.11,tcp:80"})
    )
    assert CLUSTER_IP.name in ipsets.list_sets(), "swapped in place, still matched by the rule"


def test_sets_are_made_only_with_kube_proxy_s_options(ipsets: IPSetKernel) -> None:
    with pytest.raises(IPSetError) as refused:
        ipsets.create(IPSetSpec(CLUSTER_IP.name, "hash:ip,port", V4, options=("maxelem 8",)))

    assert refused.value.errno == errno.EINVAL
    assert CLUSTER_IP.name not in ipsets.list_sets()


def test_a_set_in_use_is_replaced_but_not_destroyed(
    ipsets: IPSetKernel, hold: Callable[[str], None]
) -> None:
    ipsets.create(CLUSTER_IP)
    ipsets.add(CLUSTER_IP.name, ["10.96.0.10,tcp:80"])
    hold(CLUSTER_IP.name)

    ipsets.replace(IPSetContent(CLUSTER_IP, frozenset({"10.96.0.11,tcp:80"})))
    with pytest.raises(IPSetError, match=f"{CLUSTER_IP.name}.*in use") as refused:
        ipsets.destroy(CLUSTER_IP.name)

    assert refused.value.errno == IPSET_ERR_BUSY
    assert ipsets.list_sets()[CLUSTER_IP.name].entries == {"10.96.0.11,tcp:80"}


def test_destroy_removes_a_set_and_ignores_a_missing_one(ipsets: IPSetKernel) -> None:
    ipsets.create(CLUSTER_IP)

    ipsets.destroy(CLUSTER_IP.name)
    ipsets.destroy(CLUSTER_IP.name)

    assert CLUSTER_IP.name not in ipsets.list_sets()


def test_sets_that_are_not_ours_survive_every_operation(ipsets: IPSetKernel) -> None:
    ipsets.create(FOREIGN.spec)
    ipsets.add(FOREIGN.spec.name, sorted(FOREIGN.entries))
    planted = ipsets.list_sets()[FOREIGN.spec.name]

    ipsets.create(CLUSTER_IP)
    ipsets.add(CLUSTER_IP.name, ["10.96.0.10,tcp:80", "192.0.2.1"])
    ipsets.delete(CLUSTER_IP.name, ["10.96.0.10,tcp:80", "192.0.2.2"])
    ipsets.replace(IPSetContent(CLUSTER_IP, frozenset({"192.0.2.1,tcp:1"})))
    ipsets.destroy(CLUSTER_IP.name)
    for content in EVERY_TYPE:
        ipsets.replace(content)
        ipsets.destroy(content.spec.name)

    assert (
        ipsets.list_sets()[FOREIGN.spec.name]
        == planted
        == IPSetContent(as_listed(FOREIGN.spec), FOREIGN.entries)
    )
