"""On the real kernel: backend detection, and translate's rule sets for the example cluster
written once."""

from __future__ import annotations

import fcntl
import ipaddress
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ipvsproxy.cluster.source import load_snapshot
from ipvsproxy.kernel.errors import IptablesError
from ipvsproxy.kernel.iptables.backend import detect_backend
from ipvsproxy.kernel.iptables.command import binary
from ipvsproxy.kernel.iptables.restore import IptablesRestore
from ipvsproxy.kernel.iptables.text import Rule, is_builtin, parse_save
from ipvsproxy.model import IPFamily, IptablesRuleset
from ipvsproxy.translate import Settings, translate

XTABLES_LOCK = "/run/xtables.lock"
EXAMPLE = Path(__file__).parents[2] / "examples" / "cluster.yaml"
CLUSTER_CIDRS = (ipaddress.ip_network("10.244.0.0/16"), ipaddress.ip_network("fd00:10:244::/48"))


def _sets_matched(ruleset: IptablesRuleset) -> set[str]:
    return {
        rule[rule.index("--match-set") + 1]
        for chains in ruleset.chains.values()
        for rules in chains.values()
        for rule in rules
        if "--match-set" in rule
    }


def _content(saved: str) -> dict[tuple[str, str], list[Rule]]:
    """Every rule and user chain; a table the kernel has not set up yet holds neither."""
    return {
        (table, chain): rules
        for table, chains in parse_save(saved).items()
        for chain, rules in chains.items()
        if rules or not is_builtin(table, chain)
    }


@pytest.fixture(params=list(IPFamily), ids=str)
def ruleset(request: pytest.FixtureRequest) -> Iterator[IptablesRuleset]:
    family = request.param
    snapshot, _ = load_snapshot(EXAMPLE, "node-a")
    state = translate(snapshot, Settings(cluster_cidr=CLUSTER_CIDRS))
    ruleset = next(r for r in state.iptables if r.family is family)
    kernel = IptablesRestore()
    saved = kernel.netfilter.save(family)
    inet = "inet" if family is IPFamily.IPV4 else "inet6"
    for name in _sets_matched(ruleset):
        # Three dimensions take every flag count the rules use (dst, dst,dst, dst,dst,src).
        command = ["ipset", "create", name, "hash:ip,port,ip", "family", inet, "-exist"]
        subprocess.run(command, check=True)
    try:
        yield ruleset
    finally:
        kernel.remove(family, kernel.our_chains(family))
        assert _content(kernel.netfilter.save(family)) == _content(saved)
        for name in _sets_matched(ruleset):
            subprocess.run(["ipset", "destroy", name], check=True)


def test_detection_picks_legacy_where_nft_cannot_write_nat() -> None:
    assert detect_backend() == "legacy"
    done = subprocess.run([binary("nft", IPFamily.IPV4, "save")], capture_output=True, check=False)
    assert done.returncode != 0


def test_translates_ruleset_is_written_once_and_then_held(ruleset: IptablesRuleset) -> None:
    kernel = IptablesRestore()

    assert kernel.restore(ruleset) is True
    assert kernel.restore(ruleset) is False


def test_a_new_process_holds_translates_ruleset_without_writing(ruleset: IptablesRuleset) -> None:
    """The kernel prints --or-mark and a trailing ! -s its own way; they still compare equal."""
    assert IptablesRestore().restore(ruleset) is True

    assert IptablesRestore().restore(ruleset) is False


def test_a_rule_the_kernel_prints_its_own_way_is_written_once_per_process() -> None:
    """REJECT comes back with its default --reject-with, which canonical does not add."""
    reject = ("-m", "conntrack", "--ctstate", "NEW", "-j", "REJECT")
    ruleset = IptablesRuleset(IPFamily.IPV4, {"filter": {"KUBE-IPVS-FILTER": (reject,)}})
    kernel = IptablesRestore()
    try:
        assert kernel.restore(ruleset) is True
        assert kernel.restore(ruleset) is False
        assert IptablesRestore().restore(ruleset) is True
    finally:
        kernel.remove(IPFamily.IPV4, {"filter": frozenset({"KUBE-IPVS-FILTER"})})


def test_restore_takes_the_xtables_lock_and_gives_up_in_one_line() -> None:
    ruleset = IptablesRuleset(IPFamily.IPV4, {"filter": {"KUBE-IPVS-FILTER": ()}})
    kernel = IptablesRestore()
    assert kernel.our_chains(IPFamily.IPV4) == {}  # the backend is chosen before the lock
    with open(XTABLES_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with pytest.raises(IptablesError) as refused:
            kernel.restore(ruleset)

    assert "xtables lock" in str(refused.value)
    assert "\n" not in str(refused.value)
    assert kernel.our_chains(IPFamily.IPV4) == {}
