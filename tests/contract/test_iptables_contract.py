"""The iptables contract: IptablesRestore on the kernel and FakeIptables in memory agree.

Rules here are written the way iptables-save prints them, so reading the kernel back shows
them unchanged: that proves comments, ``!`` negation, --match-set flags and --random-fully
survive a round trip.
"""

from __future__ import annotations

import dataclasses

import pytest

from ipvsproxy.kernel.errors import IptablesError
from ipvsproxy.kernel.iptables.restore import IptablesRestore
from ipvsproxy.kernel.iptables.text import Tables, parse_save, target
from ipvsproxy.kernel.testing import FakeIptables
from ipvsproxy.model import IPFamily, IptablesJump, IptablesRuleset
from tests.contract.conftest import TEST_IPSETS

Kernel = IptablesRestore | FakeIptables

ADDRESSES = {
    IPFamily.IPV4: ("10.244.0.0/16", "192.0.2.1/32", "192.0.2.0/24"),
    IPFamily.IPV6: ("fd00:10:244::/48", "2001:db8::1/128", "2001:db8::/64"),
}

# REJECT as iptables-save prints it: with the family's default ICMP type spelled out.
REJECT_WITH = {IPFamily.IPV4: "icmp-port-unreachable", IPFamily.IPV6: "icmp6-port-unreachable"}


def _ruleset(family: IPFamily) -> IptablesRuleset:
    cluster_cidr = ADDRESSES[family][0]
    match = ("-m", "set", "--match-set", TEST_IPSETS[family])
    nat = {
        "KUBE-SERVICES": (
            ("!", "-s", cluster_cidr, "-m", "comment", "--comment", "cluster ip for masquerade",
             *match, "dst,dst", "-j", "KUBE-MARK-MASQ"),
            ("-m", "addrtype", "--dst-type", "LOCAL", "-j", "KUBE-NODE-PORT"),
        ),
        "KUBE-NODE-PORT": (("-p", "tcp", *match, "dst", "-j", "RETURN"),),
        "KUBE-MARK-MASQ": (("-j", "MARK", "--set-xmark", "0x4000/0x4000"),),
        "KUBE-POSTROUTING": (
            ("-m", "mark", "!", "--mark", "0x4000/0x4000", "-j", "RETURN"),
            ("-j", "MARK", "--set-xmark", "0x4000/0x0"),
            ("-m", "comment", "--comment", "kubernetes service traffic requiring SNAT",
             "-j", "MASQUERADE", "--random-fully"),
        ),
    }  # fmt: skip
    filter_table = {
        "KUBE-FORWARD": (
            ("-m", "conntrack", "--ctstate", "INVALID", "-j", "DROP"),
            ("-m", "comment", "--comment", "kubernetes forwarding rules",
             "-m", "mark", "--mark", "0x4000/0x4000", "-j", "ACCEPT"),
        ),
        "KUBE-NODE-PORT": (("-m", "comment", "--comment", "health", *match, "dst,dst",
                            "-j", "ACCEPT"),),
        "KUBE-IPVS-FILTER": (("-m", "conntrack", "--ctstate", "NEW", *match, "dst,dst",
                              "-j", "REJECT", "--reject-with", REJECT_WITH[family]),),
    }  # fmt: skip
    jumps = (
        IptablesJump("nat", "PREROUTING", "KUBE-SERVICES", "kubernetes service portals"),
        IptablesJump("nat", "OUTPUT", "KUBE-SERVICES", "kubernetes service portals"),
        IptablesJump("nat", "POSTROUTING", "KUBE-POSTROUTING", "kubernetes postrouting rules"),
        IptablesJump("filter", "FORWARD", "KUBE-FORWARD", "kubernetes forwarding rules"),
        IptablesJump("filter", "INPUT", "KUBE-NODE-PORT", "kubernetes health check rules"),
        IptablesJump("filter", "INPUT", "KUBE-IPVS-FILTER", "kubernetes ipvs access filter"),
    )
    return IptablesRuleset(family, {"nat": nat, "filter": filter_table}, jumps)


def _changed(ruleset: IptablesRuleset) -> IptablesRuleset:
    """One rule fewer, and a new chain with a jump to it from another of ours."""
    nat = dict(ruleset.chains["nat"])
    nat["KUBE-SERVICES"] = (
        *nat["KUBE-SERVICES"][1:],
        ("-m", "addrtype", "--dst-type", "LOCAL", "-j", "KUBE-LOAD-BALANCER"),
    )
    nat["KUBE-LOAD-BALANCER"] = (("-j", "KUBE-MARK-MASQ"),)
    return dataclasses.replace(ruleset, chains={**ruleset.chains, "nat": nat})


def _plant_foreign(iptables: Kernel, family: IPFamily) -> None:
    _, host, network = ADDRESSES[family]
    iptables.netfilter.restore(
        family,
        "*nat\n:FOREIGN-NAT - [0:0]\n"
        f"-A PREROUTING -s {host} -j ACCEPT\n"
        "-A POSTROUTING -o eth9 -j FOREIGN-NAT\n"
        "-A FOREIGN-NAT -j RETURN\nCOMMIT\n"
        "*filter\n:FOREIGN - [0:0]\n:KUBE-FIREWALL - [0:0]\n"
        "-A INPUT -i eth9 -j FOREIGN\n"
        f"-A FORWARD -d {network} -j DROP\n"
        "-A FOREIGN -j RETURN\n"
        '-A KUBE-FIREWALL -m comment --comment "kubelet owns this" -j DROP\nCOMMIT\n',
    )


def _tables(iptables: Kernel, family: IPFamily) -> Tables:
    return parse_save(iptables.netfilter.save(family))


def _ours(ruleset: IptablesRuleset) -> set[tuple[str, str]]:
    return {(table, chain) for table, chains in ruleset.chains.items() for chain in chains}


def _foreign(tables: Tables, ours: set[tuple[str, str]]) -> Tables:
    """Everything but our chains and the rules jumping to them, in order."""
    return {
        table: {
            chain: [r for r in rules if (table, target(r) or "") not in ours]
            for chain, rules in chains.items()
            if (table, chain) not in ours
        }
        for table, chains in tables.items()
    }


def _jumps_to(tables: Tables, table: str, chain: str, to: str) -> list[int]:
    return [i for i, rule in enumerate(tables[table][chain]) if target(rule) == to]


@pytest.fixture(params=list(IPFamily), ids=str)
def family(request: pytest.FixtureRequest) -> IPFamily:
    assert isinstance(request.param, IPFamily)
    return request.param


def test_restore_writes_chains_as_given_and_jumps_first(iptables: Kernel, family: IPFamily) -> None:
    _plant_foreign(iptables, family)
    ruleset = _ruleset(family)

    assert iptables.restore(ruleset) is True

    tables = _tables(iptables, family)
    for table, chains in ruleset.chains.items():
        for chain, rules in chains.items():
            assert tables[table][chain] == list(rules)
    for table, chain in {(jump.table, jump.chain) for jump in ruleset.jumps}:
        wanted = [j.target for j in ruleset.jumps if (j.table, j.chain) == (table, chain)]
        assert [target(rule) for rule in tables[table][chain][: len(wanted)]] == wanted
        assert len([r for r in tables[table][chain] if target(r) in wanted]) == len(wanted)


def test_a_second_restore_of_the_same_ruleset_writes_nothing(
    iptables: Kernel, family: IPFamily
) -> None:
    ruleset = _ruleset(family)
    iptables.restore(ruleset)
    saved = _tables(iptables, family)

    assert iptables.restore(ruleset) is False
    assert _tables(iptables, family) == saved


def test_foreign_chains_and_rules_survive_every_operation(
    iptables: Kernel, family: IPFamily
) -> None:
    _plant_foreign(iptables, family)
    ruleset = _ruleset(family)
    ours = _ours(ruleset) | _ours(_changed(ruleset))
    foreign = _foreign(_tables(iptables, family), ours)

    iptables.restore(ruleset)
    assert _foreign(_tables(iptables, family), ours) == foreign
    iptables.restore(_changed(ruleset))
    assert _foreign(_tables(iptables, family), ours) == foreign
    iptables.remove(family, iptables.our_chains(family))
    assert _tables(iptables, family) == foreign


def test_restore_of_a_changed_ruleset_rewrites_our_chains(
    iptables: Kernel, family: IPFamily
) -> None:
    iptables.restore(_ruleset(family))
    changed = _changed(_ruleset(family))

    assert iptables.restore(changed) is True

    tables = _tables(iptables, family)
    assert tables["nat"]["KUBE-SERVICES"] == list(changed.chains["nat"]["KUBE-SERVICES"])
    assert tables["nat"]["KUBE-LOAD-BALANCER"] == [("-j", "KUBE-MARK-MASQ")]
    assert iptables.restore(changed) is False


def test_restore_repairs_a_flushed_chain(iptables: Kernel, family: IPFamily) -> None:
    ruleset = _ruleset(family)
    iptables.restore(ruleset)
    written = _tables(iptables, family)
    iptables.netfilter.restore(family, "*nat\n-F KUBE-POSTROUTING\nCOMMIT\n")

    assert iptables.restore(ruleset) is True
    assert _tables(iptables, family) == written
    assert iptables.restore(ruleset) is False


def test_restore_puts_back_a_deleted_jump_once(iptables: Kernel, family: IPFamily) -> None:
    ruleset = _ruleset(family)
    iptables.restore(ruleset)
    written = _tables(iptables, family)
    iptables.netfilter.restore(
        family,
        '*nat\n-D OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES\n'
        "COMMIT\n",
    )

    assert iptables.restore(ruleset) is True
    assert _tables(iptables, family) == written


def test_restore_leaves_one_jump_where_someone_duplicated_it(
    iptables: Kernel, family: IPFamily
) -> None:
    ruleset = _ruleset(family)
    iptables.restore(ruleset)
    iptables.netfilter.restore(
        family,
        "*filter\n"
        '-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD\n'
        "COMMIT\n",
    )

    assert iptables.restore(ruleset) is True
    assert _jumps_to(_tables(iptables, family), "filter", "FORWARD", "KUBE-FORWARD") == [0]


def test_a_foreign_rule_inserted_above_our_jump_is_left_there(
    iptables: Kernel, family: IPFamily
) -> None:
    """As kube-proxy: a jump that exists anywhere in its chain is fine, never moved."""
    ruleset = _ruleset(family)
    iptables.restore(ruleset)
    iptables.netfilter.restore(family, "*nat\n-I PREROUTING 1 -i eth9 -j RETURN\nCOMMIT\n")

    assert iptables.restore(ruleset) is False
    assert _jumps_to(_tables(iptables, family), "nat", "PREROUTING", "KUBE-SERVICES") == [1]


def test_the_diff_is_what_a_restore_would_write_rule_by_rule(
    iptables: Kernel, family: IPFamily
) -> None:
    _plant_foreign(iptables, family)
    ruleset = _ruleset(family)
    fresh = {(d.table, d.chain): d for d in iptables.diff(ruleset)}
    # Every chain new with all its rules; each built-in chain gains its jumps.
    assert {key for key, diff in fresh.items() if diff.new} == _ours(ruleset)
    assert fresh["nat", "KUBE-MARK-MASQ"].added == ("-j MARK --set-xmark 0x4000/0x4000",)
    assert fresh["filter", "INPUT"].new is False
    assert fresh["filter", "INPUT"].added == (
        '-m comment --comment "kubernetes health check rules" -j KUBE-NODE-PORT',
        '-m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-FILTER',
    )
    assert all(diff.removed == () for diff in fresh.values())

    iptables.restore(ruleset)
    assert iptables.diff(ruleset) == ()
    changed = {(d.table, d.chain): d for d in iptables.diff(_changed(ruleset))}
    assert changed.keys() == {("nat", "KUBE-SERVICES"), ("nat", "KUBE-LOAD-BALANCER")}
    services = changed["nat", "KUBE-SERVICES"]
    assert services.new is False
    assert services.added == ("-m addrtype --dst-type LOCAL -j KUBE-LOAD-BALANCER",)
    assert len(services.removed) == 1 and services.removed[0].endswith("-j KUBE-MARK-MASQ")
    # Drift shows as what the restore puts back.
    iptables.netfilter.restore(family, "*nat\n-F KUBE-POSTROUTING\nCOMMIT\n")
    (flushed,) = iptables.diff(ruleset)
    assert (flushed.chain, len(flushed.added), flushed.removed) == ("KUBE-POSTROUTING", 3, ())


def test_our_chains_are_kube_proxy_ipvs_chains_only(iptables: Kernel, family: IPFamily) -> None:
    _plant_foreign(iptables, family)
    assert iptables.our_chains(family) == {}

    iptables.restore(_ruleset(family))

    assert iptables.our_chains(family) == {
        "nat": {"KUBE-SERVICES", "KUBE-NODE-PORT", "KUBE-MARK-MASQ", "KUBE-POSTROUTING"},
        "filter": {"KUBE-FORWARD", "KUBE-NODE-PORT", "KUBE-IPVS-FILTER"},
    }


def test_remove_deletes_jumps_then_chains_and_can_run_twice(
    iptables: Kernel, family: IPFamily
) -> None:
    iptables.restore(_changed(_ruleset(family)))
    stale = {"nat": frozenset({"KUBE-LOAD-BALANCER"})}

    iptables.remove(family, stale)
    iptables.remove(family, stale)

    tables = _tables(iptables, family)
    assert "KUBE-LOAD-BALANCER" not in tables["nat"]
    assert all(target(rule) != "KUBE-LOAD-BALANCER" for rule in tables["nat"]["KUBE-SERVICES"])
    assert "KUBE-SERVICES" in tables["nat"]


def test_remove_of_everything_leaves_no_jump_behind(iptables: Kernel, family: IPFamily) -> None:
    iptables.restore(_ruleset(family))

    iptables.remove(family, iptables.our_chains(family))

    tables = _tables(iptables, family)
    assert iptables.our_chains(family) == {}
    assert all(target(rule) != "KUBE-SERVICES" for rule in tables["nat"]["PREROUTING"])
    assert tables["filter"]["INPUT"] == []
    assert tables["filter"]["FORWARD"] == []


def test_a_rule_matching_a_missing_ipset_is_refused_in_one_line(
    iptables: Kernel, family: IPFamily
) -> None:
    ruleset = _ruleset(family)
    nat = {**ruleset.chains["nat"], "KUBE-NODE-PORT": (("-m", "set", "--match-set",
           "IPVSP-NO-SUCH-SET", "dst", "-j", "RETURN"),)}  # fmt: skip
    broken = dataclasses.replace(ruleset, chains={**ruleset.chains, "nat": nat})
    nat_before = _tables(iptables, family)["nat"]

    with pytest.raises(IptablesError) as refused:
        iptables.restore(broken)

    assert "\n" not in str(refused.value)
    assert "IPVSP-NO-SUCH-SET" in str(refused.value)
    assert _tables(iptables, family)["nat"] == nat_before
    assert iptables.restore(ruleset) is True
