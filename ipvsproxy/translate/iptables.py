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
    IP_PROTOCOL_NUMBERS,
    IPTABLES_CHAINS,
    IPFamily,
    IPNetwork,
    IPSetContent,
    IptablesJump,
    IptablesRuleset,
    VirtualServerKey,
)
from ipvsproxy.names import SETS, set_name
from ipvsproxy.translate.settings import LocalDetectMode, Settings

Rule = tuple[str, ...]


# kube-proxy's iptablesJumpChain, in its order. kube-proxy prepends each in turn to its
# built-in chain, so within a chain the last listed ends up first: INPUT sends a packet to
# KUBE-IPVS-FILTER, then KUBE-PROXY-FIREWALL, then KUBE-NODE-PORT. That order decides verdicts
# (a load balancer's source ranges drop a packet before a health-check node port on the same
# port accepts it), so ours is the same.
_KUBE_PROXY_JUMP_CHAIN = (
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
# Each built-in chain's jumps in the order they stand in it.
JUMPS = tuple(reversed(_KUBE_PROXY_JUMP_CHAIN))

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
            table: {chain: [] for chain in chains} for table, chains in IPTABLES_CHAINS.items()
        }

    def add(self, table: str, chain: str, *rule: str) -> None:
        self.tables[table][chain].append(rule)

    def frozen(self) -> dict[str, dict[str, tuple[Rule, ...]]]:
        return {
            table: {chain: tuple(rules) for chain, rules in chains.items()}
            for table, chains in self.tables.items()
        }


def _not_local(
    settings: Settings, family: IPFamily, pod_cidrs: tuple[IPNetwork, ...]
) -> Rule | None:
    """kube-proxy's LocalTrafficDetector.IfNotLocal, or None when it cannot tell."""
    if settings.detect_local_mode is LocalDetectMode.BRIDGE_INTERFACE:
        return ("!", "-i", settings.bridge_interface) if settings.bridge_interface else None
    if settings.detect_local_mode is LocalDetectMode.INTERFACE_NAME_PREFIX:
        prefix = settings.interface_name_prefix
        return ("!", "-i", f"{prefix}+") if prefix else None
    # One CIDR per family, the first, as kube-proxy's detector takes.
    local = pod_cidrs if settings.detect_local_mode is LocalDetectMode.NODE_CIDR else None
    cidr = next((c for c in local or settings.cluster_cidr if IPFamily.of(c) is family), None)
    return ("!", "-s", str(cidr)) if cidr is not None else None


def _cluster_ip_masquerade(
    rules: _Rules, family: IPFamily, settings: Settings, pod_cidrs: tuple[IPNetwork, ...]
) -> None:
    matched = _commented_set("KUBE-CLUSTER-IP", family, "dst,dst")
    not_local = _not_local(settings, family, pod_cidrs)
    if settings.masquerade_all:
        rules.add("nat", "KUBE-SERVICES", *matched, "-j", "KUBE-MARK-MASQ")
    elif not_local is not None:
        # Off-cluster traffic to a service IP (e.g. via a static route to any node) may
        # bounce to another node's pod, so it must be masqueraded. The address or
        # interface match comes first, where iptables-save prints it.
        rules.add("nat", "KUBE-SERVICES", *not_local, *matched, "-j", "KUBE-MARK-MASQ")
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


def _args(text: str) -> Rule:
    """A rule fragment without quoted parts, written as iptables-save prints it."""
    return tuple(text.split())


def _external_ip_accept(rules: _Rules, matched: Rule) -> None:
    """Accept external-IP traffic from off the machine, or bound for a local address."""
    off_machine = _args("-m physdev ! --physdev-is-in -m addrtype ! --src-type LOCAL -j ACCEPT")
    rules.add("nat", "KUBE-SERVICES", *matched, *off_machine)
    rules.add("nat", "KUBE-SERVICES", *matched, *_args("-m addrtype --dst-type LOCAL -j ACCEPT"))


def _services(
    rules: _Rules,
    family: IPFamily,
    settings: Settings,
    filled: frozenset[str],
    pod_cidrs: tuple[IPNetwork, ...],
) -> None:
    """nat KUBE-SERVICES after its load-balancer jump: masquerade marks, then accepts."""
    if "KUBE-CLUSTER-IP" in filled:
        _cluster_ip_masquerade(rules, family, settings, pod_cidrs)
    if "KUBE-EXTERNAL-IP" in filled:
        matched = _commented_set("KUBE-EXTERNAL-IP", family, "dst,dst")
        rules.add("nat", "KUBE-SERVICES", *matched, "-j", "KUBE-MARK-MASQ")
        _external_ip_accept(rules, matched)
    if "KUBE-EXTERNAL-IP-LOCAL" in filled:
        _external_ip_accept(rules, _commented_set("KUBE-EXTERNAL-IP-LOCAL", family, "dst,dst"))
    rules.add("nat", "KUBE-SERVICES", *_args("-m addrtype --dst-type LOCAL -j KUBE-NODE-PORT"))
    # Accept IPVS traffic in case other rules would drop it; these must come last.
    for base in ("KUBE-CLUSTER-IP", "KUBE-LOAD-BALANCER"):
        if base in filled:
            rules.add("nat", "KUBE-SERVICES", *_set(base, family, "dst,dst"), "-j", "ACCEPT")


def _masquerade_value(settings: Settings) -> int:
    """kube-proxy's masquerade mark: bit --iptables-masquerade-bit of the packet mark."""
    return 1 << settings.masquerade_bit


def _masquerade_mark(settings: Settings) -> str:
    value = _masquerade_value(settings)
    return f"{value:#x}/{value:#x}"


def _filters(
    rules: _Rules, family: IPFamily, settings: Settings, no_node_access: list[VirtualServerKey]
) -> None:
    """The filter table: forwarding, health checks, firewall tail and VIP access filters."""
    rules.add("filter", "KUBE-SOURCE-RANGES-FIREWALL", "-j", "DROP")
    host = 32 if family is IPFamily.IPV4 else 128
    for key in no_node_access:
        # IPVS sees the node's own traffic to a load balancer IP with that IP as source.
        vproto = IP_PROTOCOL_NUMBERS[key.protocol]
        rules.add(
            "filter",
            "KUBE-IPVS-OUT-FILTER",
            *_args(f"-s {key.address}/{host} -m ipvs --vproto {vproto}"),
            *_args(f"--vaddr {key.address} --vport {key.port} -j DROP"),
        )
    rules.add(
        "filter",
        "KUBE-FORWARD",
        *_comment("kubernetes forwarding rules"),
        *_args(f"-m mark --mark {_masquerade_mark(settings)} -j ACCEPT"),
    )
    rules.add(
        "filter",
        "KUBE-FORWARD",
        *_comment("kubernetes forwarding conntrack rule"),
        *_args("-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"),
    )
    health_checks = _commented_set("KUBE-HEALTH-CHECK-NODE-PORT", family, "dst")
    rules.add("filter", "KUBE-NODE-PORT", *health_checks, "-j", "ACCEPT")
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
    unreachable = "icmp-port-unreachable" if family is IPFamily.IPV4 else "icmp6-port-unreachable"
    rules.add(
        "filter",
        "KUBE-IPVS-FILTER",
        *_args("-m conntrack --ctstate NEW"),
        *_set("KUBE-IPVS-IPS", family, "dst"),
        *_args(f"-j REJECT --reject-with {unreachable}"),
    )


def _masquerade(rules: _Rules, settings: Settings) -> None:
    """KUBE-POSTROUTING masquerades marked packets; KUBE-MARK-MASQ marks them."""
    mark = _masquerade_mark(settings)
    rules.add("nat", "KUBE-POSTROUTING", *_args(f"-m mark ! --mark {mark} -j RETURN"))
    # Clear the mark so a packet that re-traverses the stack is not masqueraded twice.
    clear = f"{_masquerade_value(settings):#x}/0x0"
    rules.add("nat", "KUBE-POSTROUTING", *_args(f"-j MARK --set-xmark {clear}"))
    rules.add(
        "nat",
        "KUBE-POSTROUTING",
        *_comment("kubernetes service traffic requiring SNAT"),
        *_args("-j MASQUERADE --random-fully"),
    )
    rules.add("nat", "KUBE-MARK-MASQ", *_args(f"-j MARK --set-xmark {mark}"))


def _ruleset(
    family: IPFamily,
    settings: Settings,
    filled: frozenset[str],
    no_node_access: list[VirtualServerKey],
    pod_cidrs: tuple[IPNetwork, ...],
) -> IptablesRuleset:
    rules = _Rules()
    # Connections to localhost leave KUBE-SERVICES first.
    loopback = "127.0.0.0/8" if family is IPFamily.IPV4 else "::1/128"
    rules.add("nat", "KUBE-SERVICES", "-s", loopback, "-j", "RETURN")
    for base, table, chain, protocol, flags, target in _SET_RULES:
        if base in filled:
            prefix = ("-p", protocol) if protocol else ()
            rules.add(table, chain, *prefix, *_commented_set(base, family, flags), "-j", target)
    _services(rules, family, settings, filled, pod_cidrs)
    rules.add("nat", "KUBE-LOAD-BALANCER", "-j", "KUBE-MARK-MASQ")
    _filters(rules, family, settings, no_node_access)
    _masquerade(rules, settings)
    return IptablesRuleset(family, rules.frozen(), JUMPS)


def build_iptables(
    settings: Settings,
    ipsets: Mapping[str, IPSetContent],
    no_node_access: Iterable[VirtualServerKey],
    pod_cidrs: tuple[IPNetwork, ...] = (),
) -> tuple[IptablesRuleset, ...]:
    """One ruleset per family. ``no_node_access``: load-balancer virtual servers whose
    source ranges leave out the node, so the node's own traffic to them is dropped;
    ``pod_cidrs``: this node's, for --detect-local-mode=NodeCIDR."""
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
                pod_cidrs,
            )
        )
    return tuple(rulesets)
