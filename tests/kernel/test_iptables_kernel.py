"""On the real kernel: backend detection, and translate's rule sets for the example cluster
written once."""

from __future__ import annotations

import fcntl
import ipaddress
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ipvsproxy.cluster.source import load_snapshot
from ipvsproxy.kernel.errors import IptablesError
from ipvsproxy.kernel.iptables.backend import HINT_CHAINS, detect_backend, rule_lines
from ipvsproxy.kernel.iptables.command import binary
from ipvsproxy.kernel.iptables.restore import CommandNetfilter, IptablesRestore
from ipvsproxy.kernel.iptables.text import Rule, is_builtin, parse_save
from ipvsproxy.model import IPFamily, IptablesRuleset
from ipvsproxy.translate import Settings, translate

XTABLES_LOCK = "/run/xtables.lock"
NAT_CHAIN = "IPVSP-TEST-NAT"
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


def _fake_nft(
    folder: Path, monkeypatch: pytest.MonkeyPatch, *, writes_nat: bool, rules: int = 1
) -> None:
    """iptables-nft binaries of the test's own, first on PATH: a flavour holding ``rules`` rules
    that either writes nat or, as on a kernel with nf_tables but no nft nat, saves and refuses
    every write."""
    saved = "*filter\n:INPUT ACCEPT [0:0]\n" + "-A INPUT -j ACCEPT\n" * rules + "COMMIT\n"
    refusal = "echo 'iptables-nft-restore: line 2 failed: No such file or directory' >&2; exit 1"
    for family in IPFamily:
        save = folder / binary("nft", family, "save")
        save.write_text(f"#!/bin/sh\nprintf '{saved}'\n")
        restore = folder / binary("nft", family, "restore")
        restore.write_text(f"#!/bin/sh\ncat >/dev/null\n{'' if writes_nat else refusal}\n")
        for tool in (save, restore):
            tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")


def _assert_writes_nat(backend: str) -> None:
    """``backend`` writes a nat chain in this kernel and reads it back (then removes it)."""
    netfilter = CommandNetfilter(backend)
    netfilter.restore(IPFamily.IPV4, f"*nat\n:{NAT_CHAIN} - [0:0]\nCOMMIT\n")
    try:
        assert f":{NAT_CHAIN} " in netfilter.save(IPFamily.IPV4)
    finally:
        netfilter.restore(IPFamily.IPV4, f"*nat\n-X {NAT_CHAIN}\nCOMMIT\n")


def test_the_detected_backend_writes_the_nat_table() -> None:
    """Whichever flavour this kernel's modules allow, the chosen one can hold our chains."""
    _assert_writes_nat(detect_backend())


def test_detection_passes_over_a_flavour_that_saves_but_cannot_write_nat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_nft(tmp_path, monkeypatch, writes_nat=False)

    assert detect_backend() == "legacy"
    _assert_writes_nat("legacy")


def test_kubelets_hint_chain_outweighs_more_rules_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    legacy = CommandNetfilter("legacy")
    legacy_rules = rule_lines(legacy.save(family) for family in IPFamily)
    _fake_nft(tmp_path, monkeypatch, writes_nat=True, rules=legacy_rules + 1)
    assert detect_backend() == "nft"
    hint = HINT_CHAINS[0].strip(": ")

    legacy.restore(IPFamily.IPV4, f"*mangle\n:{hint} - [0:0]\nCOMMIT\n")
    try:
        assert detect_backend() == "legacy"
    finally:
        legacy.restore(IPFamily.IPV4, f"*mangle\n-X {hint}\nCOMMIT\n")


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
