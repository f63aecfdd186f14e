"""kube-proxy's IPVS-mode iptables chains and rules, per family (pkg/proxy/ipvs/proxier.go).

The rules match ipsets (see ``ipsets``), so they stay constant in size as services grow. As
kube-proxy does, a rule that matches a set is only written while that set has members.

Each rule is written with its arguments in the order and spelling ``iptables-save`` prints
them (address matches before ``-m`` matches, MARK as ``--set-xmark``, REJECT with its
default ``--reject-with``), so the kernel layer can compare what it reads back with what it
wrote.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ipvsproxy.model import (
    IPFamily,
    IPNetwork,
    IPSetContent,
    IptablesJump,
    IptablesRuleset,
    Protocol,
    VirtualServerKey,
)
from ipvsproxy.translate.ipsets import SETS, set_name
from ipvsproxy.translate.settings import Settings

# iptables-save prints --vproto as a number.
_PROTOCOL_NUMBERS = {Protocol.TCP: 6, Protocol.UDP: 17, Protocol.SCTP: 132}
MASQ_BIT = 0x4000
MASQ_MARK = f"{MASQ_BIT:#x}/{MASQ_BIT:#x}"
Rule = tuple[str, ...]

# Created in this order in each table, as kube-proxy's iptablesChains.
NAT_CHAINS = (
    "KUBE-SERVICES",
    "KUBE-POSTROUTING",
    "KUBE-NODE-PORT",
    "KUBE-LOAD-BALANCER",
    "KUBE-MARK-MASQ",
)
FILTER_CHAINS = (
    "KUBE-FORWARD",
    "KUBE-NODE-PORT",
    "KUBE-PROXY-FIREWALL",
    "KUBE-SOURCE-RANGES-FIREWALL",
    "KUBE-IPVS-FILTER",
    "KUBE-IPVS-OUT-FILTER",
)

# kube-proxy's iptablesJumpChain, in its order; kube-proxy prepends each to the built-in chain.
JUMPS = (
    IptablesJump("nat", "OUTPUT", "KUBE-SERVICES", "kubernetes service portals"),
    IptablesJump("nat", "PREROUTING", "KUBE-SERVICES", "kubernetes service portals"),
    IptablesJump("nat", "POSTROUTING", "KUBE-POSTROUTING", "kubernetes postrouting rules"),
    IptablesJump("filter", "FORWARD", "KUBE-FORWARD", "kubernetes forwarding rules"),
    IptablesJump("filter", "INPUT", "KUBE-NODE-PORT", "kubernetes health check rules"),
    IptablesJump("filter", "INPUT", "KUBE-PROXY-FIREWALL", "kube-proxy firewall rules"),
    IptablesJump("filter", "FORWARD", "KUBE-PROXY-FIREWALL", "kube-proxy firewall rules"),
    IptablesJump("filter", "INPUT", "KUBE-IPVS-FILTER", "kubernetes ipvs access filter"),
    IptablesJump("filter", "OUTPUT", "KUBE-IPVS-OUT-FILTER", "kubernetes ipvs access filter"),
)

# kube-proxy's ipsetWithIptablesChain: (set, table, chain, protocol, match flags, target).
# The -LOCAL node-port sets come before their masquerading siblings so they RETURN first.
_SET_RULES = (
    ("KUBE-LOOP-BACK", "nat", "KUBE-POSTROUTING", "", "dst,dst,src", "MASQUERADE"),
    ("KUBE-LOAD-BALANCER", "nat", "KUBE-SERVICES", "", "dst,dst", "KUBE-LOAD-BALANCER"),
    ("KUBE-LOAD-BALANCER-LOCAL", "nat", "KUBE-LOAD-BALANCER", "", "dst,dst", "RETURN"),
    ("KUBE-NODE-PORT-LOCAL-TCP", "nat", "KUBE-NODE-PORT", "tcp", "dst", "RETURN"),
    ("KUBE-NODE-PORT-TCP", "nat", "KUBE-NODE-PORT", "tcp", "dst", "KUBE-MARK-MASQ"),
    ("KUBE-NODE-PORT-LOCAL-UDP", "nat", "KUBE-NODE-PORT", "udp", "dst", "RETURN"),
    ("KUBE-NODE-PORT-UDP", "nat", "KUBE-NODE-PORT", "udp", "dst", "KUBE-MARK-MASQ"),
    ("KUBE-NODE-PORT-LOCAL-SCTP-HASH", "nat", "KUBE-NODE-PORT", "sctp", "dst,dst", "RETURN"),
    ("KUBE-NODE-PORT-SCTP-HASH", "nat", "KUBE-NODE-PORT", "sctp", "dst,dst", "KUBE-MARK-MASQ"),
    (
        "KUBE-LOAD-BALANCER-FW",
        "filter",
        "KUBE-PROXY-FIREWALL",
        "",
        "dst,dst",
        "KUBE-SOURCE-RANGES-FIREWALL",
    ),
    (
        "KUBE-LOAD-BALANCER-SOURCE-CIDR",
        "filter",
        "KUBE-SOURCE-RANGES-FIREWALL",
        "",
        "dst,dst,src",
        "RETURN",
    ),
    (
        "KUBE-LOAD-BALANCER-SOURCE-IP",
        "filter",
        "KUBE-SOURCE-RANGES-FIREWALL",
        "",
        "dst,dst,src",
        "RETURN",
    ),
)


def _comment(text: str) -> Rule:
    return ("-m", "comment", "--comment", text)


def _set(base: str, family: IPFamily, flags: str) -> Rule:
    return ("-m", "set", "--match-set", set_name(base, family), flags)


def _commented_set(base: str, family: IPFamily, flags: str) -> Rule:
    return (*_comment(SETS[base][1]), *_set(base, family, flags))


class _Rules:
    """Rules appended per table and chain, in kube-proxy's writing order."""

    def __init__(self) -> None:
        self.tables: dict[str, dict[str, list[Rule]]] = {
            "nat": {chain: [] for chain in NAT_CHAINS},
            "filter": {chain: [] for chain in FILTER_CHAINS},
        }

    def add(self, table: str, chain: str, *rule: str) -> None:
        self.tables[table][chain].append(rule)

    def frozen(self) -> dict[str, dict[str, tuple[Rule, ...]]]:
        return {
            table: {chain: tuple(rules) for chain, rules in chains.items()}
            for table, chains in self.tables.items()
        }


def _cluster_ip_masquerade(
    rules: _Rules, family: IPFamily, settings: Settings, local_cidr: IPNetwork | None
) -> None:
    matched = _commented_set("KUBE-CLUSTER-IP", family, "dst,dst")
    if settings.masquerade_all:
        rules.add("nat", "KUBE-SERVICES", *matched, "-j", "KUBE-MARK-MASQ")
    elif local_cidr is not None:
        # Off-cluster traffic to a service IP (e.g. via a static route to any node) may
        # bounce to another node's pod, so it must be masqueraded.
        rules.add(
            "nat", "KUBE-SERVICES", "!", "-s", str(local_cidr), *matched, "-j", "KUBE-MARK-MASQ"
        )
    else:
        # No way to tell pod traffic: masquerade what the node itself sends from a service
        # IP (kube-ipvs0 makes the VIP the preferred source for a VIP destination).
        rules.add(
            "nat",
            "KUBE-SERVICES",
            *_commented_set("KUBE-CLUSTER-IP", family, "src,dst"),
            "-j",
            "KUBE-MARK-MASQ",
        )


def _external_ip_accept(rules: _Rules, matched: Rule) -> None:
    """Accept external-IP traffic from off the machine, or bound for a local address."""
    rules.add(
        "nat",
        "KUBE-SERVICES",
        *matched,
        "-m",
        "physdev",
        "!",
        "--physdev-is-in",
        "-m",
        "addrtype",
        "!",
        "--src-type",
        "LOCAL",
        "-j",
        "ACCEPT",
    )
    rules.add(
        "nat", "KUBE-SERVICES", *matched, "-m", "addrtype", "--dst-type", "LOCAL", "-j", "ACCEPT"
    )


def _ruleset(
    family: IPFamily,
    settings: Settings,
    filled: frozenset[str],
    no_node_access: list[VirtualServerKey],
) -> IptablesRuleset:
    rules = _Rules()
    loopback = "127.0.0.0/8" if family is IPFamily.IPV4 else "::1/128"
    rules.add("nat", "KUBE-SERVICES", "-s", loopback, "-j", "RETURN")
    for base, table, chain, protocol, flags, target in _SET_RULES:
        if base in filled:
            matched = _commented_set(base, family, flags)
            prefix = ("-p", protocol) if protocol else ()
            rules.add(table, chain, *prefix, *matched, "-j", target)
    if "KUBE-CLUSTER-IP" in filled:
        local_cidr = next((c for c in settings.cluster_cidr if IPFamily.of(c) is family), None)
        _cluster_ip_masquerade(rules, family, settings, local_cidr)
    if "KUBE-EXTERNAL-IP" in filled:
        matched = _commented_set("KUBE-EXTERNAL-IP", family, "dst,dst")
        rules.add("nat", "KUBE-SERVICES", *matched, "-j", "KUBE-MARK-MASQ")
        _external_ip_accept(rules, matched)
    if "KUBE-EXTERNAL-IP-LOCAL" in filled:
        _external_ip_accept(rules, _commented_set("KUBE-EXTERNAL-IP-LOCAL", family, "dst,dst"))
    rules.add(
        "nat", "KUBE-SERVICES", "-m", "addrtype", "--dst-type", "LOCAL", "-j", "KUBE-NODE-PORT"
    )
    rules.add("nat", "KUBE-LOAD-BALANCER", "-j", "KUBE-MARK-MASQ")
    rules.add("filter", "KUBE-SOURCE-RANGES-FIREWALL", "-j", "DROP")
    host = 32 if family is IPFamily.IPV4 else 128
    for key in no_node_access:
        # IPVS sees the node's own traffic to a load balancer IP with that IP as source.
        rules.add(
            "filter",
            "KUBE-IPVS-OUT-FILTER",
            "-s",
            f"{key.address}/{host}",
            "-m",
            "ipvs",
            "--vproto",
            str(_PROTOCOL_NUMBERS[key.protocol]),
            "--vaddr",
            str(key.address),
            "--vport",
            str(key.port),
            "-j",
            "DROP",
        )
    for base in ("KUBE-CLUSTER-IP", "KUBE-LOAD-BALANCER"):
        if base in filled:
            rules.add("nat", "KUBE-SERVICES", *_set(base, family, "dst,dst"), "-j", "ACCEPT")
    rules.add(
        "filter",
        "KUBE-FORWARD",
        *_comment("kubernetes forwarding rules"),
        "-m",
        "mark",
        "--mark",
        MASQ_MARK,
        "-j",
        "ACCEPT",
    )
    rules.add(
        "filter",
        "KUBE-FORWARD",
        *_comment("kubernetes forwarding conntrack rule"),
        "-m",
        "conntrack",
        "--ctstate",
        "RELATED,ESTABLISHED",
        "-j",
        "ACCEPT",
    )
    rules.add(
        "filter",
        "KUBE-NODE-PORT",
        *_commented_set("KUBE-HEALTH-CHECK-NODE-PORT", family, "dst"),
        "-j",
        "ACCEPT",
    )
    # kubernetes #72236: a service IP on kube-ipvs0 is a local address, so without this any
    # host port would answer on it. Only the service ports themselves get through.
    for base, flags in (
        ("KUBE-LOAD-BALANCER", "dst,dst"),
        ("KUBE-CLUSTER-IP", "dst,dst"),
        ("KUBE-EXTERNAL-IP", "dst,dst"),
        ("KUBE-EXTERNAL-IP-LOCAL", "dst,dst"),
        ("KUBE-HEALTH-CHECK-NODE-PORT", "dst"),
    ):
        rules.add("filter", "KUBE-IPVS-FILTER", *_set(base, family, flags), "-j", "RETURN")
    rules.add(
        "filter",
        "KUBE-IPVS-FILTER",
        "-m",
        "conntrack",
        "--ctstate",
        "NEW",
        *_set("KUBE-IPVS-IPS", family, "dst"),
        "-j",
        "REJECT",
        "--reject-with",
        "icmp-port-unreachable" if family is IPFamily.IPV4 else "icmp6-port-unreachable",
    )
    rules.add("nat", "KUBE-POSTROUTING", "-m", "mark", "!", "--mark", MASQ_MARK, "-j", "RETURN")
    # Clear the mark so a packet that re-traverses the stack is not masqueraded twice.
    rules.add("nat", "KUBE-POSTROUTING", "-j", "MARK", "--set-xmark", f"{MASQ_BIT:#x}/0x0")
    rules.add(
        "nat",
        "KUBE-POSTROUTING",
        *_comment("kubernetes service traffic requiring SNAT"),
        "-j",
        "MASQUERADE",
        "--random-fully",
    )
    rules.add("nat", "KUBE-MARK-MASQ", "-j", "MARK", "--set-xmark", MASQ_MARK)
    return IptablesRuleset(family, rules.frozen(), JUMPS)


def build_iptables(
    settings: Settings,
    ipsets: Mapping[str, IPSetContent],
    no_node_access: Iterable[VirtualServerKey],
) -> tuple[IptablesRuleset, ...]:
    """One ruleset per family. ``no_node_access``: load-balancer virtual servers whose
    source ranges leave out the node, so the node's own traffic to them is dropped."""
    blocked = sorted(no_node_access, key=VirtualServerKey.sort_key)
    rulesets: list[IptablesRuleset] = []
    for family in IPFamily:
        filled = frozenset(base for base in SETS if ipsets[set_name(base, family)].entries)
        rulesets.append(
            _ruleset(
                family,
                settings,
                filled,
                [key for key in blocked if IPFamily.of(key.address) is family],
            )
        )
    return tuple(rulesets)
