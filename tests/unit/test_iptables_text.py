"""The save/restore text: quoting that iptables-restore reads back to the same arguments."""

from __future__ import annotations

import pytest

from ipvsproxy.kernel.iptables.text import (
    Rule,
    canonical,
    parse_save,
    render_rule,
    render_save,
    target,
)
from ipvsproxy.kernel.testing import FakeIptables
from ipvsproxy.model import IPFamily, IptablesRuleset

RULES = [
    ("!", "-s", "10.0.0.0/8", "-m", "comment", "--comment", "two words", "-j", "RETURN"),
    ("-m", "comment", "--comment", 'say "hi" \\ there', "-j", "ACCEPT"),
    ("-m", "comment", "--comment", "", "-j", "ACCEPT"),
    ("-j", "MASQUERADE", "--random-fully"),
]


def test_rendered_rules_parse_back_to_the_same_arguments() -> None:
    tables = {"nat": {"PREROUTING": [RULES[0]], "KUBE-X": RULES}}

    assert parse_save(render_save(tables)) == tables


def test_render_quotes_only_what_needs_it() -> None:
    assert render_rule(("-m", "comment", "--comment", "nospace", "-j", "X")) == (
        "-m comment --comment nospace -j X"
    )
    assert render_rule(("--comment", "a b")) == '--comment "a b"'


def test_target_reads_jump_and_goto() -> None:
    assert target(("-p", "tcp", "-j", "KUBE-A")) == "KUBE-A"
    assert target(("-g", "KUBE-B")) == "KUBE-B"
    assert target(("-m", "mark", "--mark", "0x1")) is None


def test_the_fake_accepts_any_ipset_unless_told_which_exist() -> None:
    rule = ("-m", "set", "--match-set", "ANY", "dst", "-j", "RETURN")
    ruleset = IptablesRuleset(IPFamily.IPV4, {"nat": {"KUBE-SERVICES": (rule,)}})

    assert FakeIptables().restore(ruleset) is True


@pytest.mark.parametrize(
    ("written", "printed"),
    [
        (
            ("-m", "comment", "--comment", "c", "!", "-s", "10.0.0.0/8", "-j", "KUBE-MARK-MASQ"),
            ("!", "-s", "10.0.0.0/8", "-m", "comment", "--comment", "c", "-j", "KUBE-MARK-MASQ"),
        ),
        (("-p", "tcp", "-d", "10.0.0.1", "-j", "X"), ("-d", "10.0.0.1/32", "-p", "tcp", "-j", "X")),
        (("-o", "e0", "-s", "fd00::1", "-j", "X"), ("-s", "fd00::1/128", "-o", "e0", "-j", "X")),
        (("-j", "MARK", "--or-mark", "0x4000"), ("-j", "MARK", "--set-xmark", "0x4000/0x4000")),
        (("-j", "MARK", "--xor-mark", "16384"), ("-j", "MARK", "--set-xmark", "0x4000/0x0")),
        (("-j", "MARK", "--set-mark", "0x1"), ("-j", "MARK", "--set-xmark", "0x1/0xffffffff")),
        (("-m", "mark", "!", "--mark", "0x4000/0x4000", "-j", "RETURN"),) * 2,
        (("-j", "MASQUERADE", "--random-fully"),) * 2,
    ],
)
def test_canonical_is_how_iptables_save_prints_a_rule(written: Rule, printed: Rule) -> None:
    assert canonical(written) == printed
    assert canonical(printed) == printed


def test_a_new_fake_holds_rules_the_kernel_prints_in_its_own_form() -> None:
    iptables = FakeIptables()
    iptables.netfilter.restore(
        IPFamily.IPV4,
        "*nat\n:KUBE-MARK-MASQ - [0:0]\n"
        "-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000\nCOMMIT\n",
    )
    ruleset = IptablesRuleset(
        IPFamily.IPV4, {"nat": {"KUBE-MARK-MASQ": (("-j", "MARK", "--or-mark", "0x4000"),)}}
    )

    assert iptables.restore(ruleset) is False
