"""kube-proxy's IPVS-mode iptables chains: masquerade marking and NodePort/LB dispatch.

The rules only match ipsets (see ``ipsets``), so they stay constant in size as services grow.
"""

from __future__ import annotations

from ipvsproxy.model import IPFamily, IPNetwork, IptablesJump, IptablesRuleset
from ipvsproxy.translate.ipsets import set_name
from ipvsproxy.translate.settings import Settings

MASQ_MARK = "0x4000/0x4000"
Rule = tuple[str, ...]


def _comment(text: str) -> Rule:
    return ("-m", "comment", "--comment", text)


def _match(base: str, family: IPFamily, flags: str) -> Rule:
    return ("-m", "set", "--match-set", set_name(base, family), flags)


def _services(family: IPFamily, settings: Settings, cidrs: list[IPNetwork]) -> list[Rule]:
    cluster = (
        *_comment("Kubernetes service cluster ip + port for masquerade purpose"),
        *_match("KUBE-CLUSTER-IP", family, "dst,dst"),
    )
    rules: list[Rule] = []
    if settings.masquerade_all:
        rules.append((*cluster, "-j", "KUBE-MARK-MASQ"))
    rules += [(*cluster, "!", "-s", str(cidr), "-j", "KUBE-MARK-MASQ") for cidr in cidrs]
    external = _comment("Kubernetes service external ip + port for masquerade and filter purpose")
    rules += [
        (*external, *_match("KUBE-EXTERNAL-IP", family, "dst,dst"), "-j", "KUBE-MARK-MASQ"),
        (
            *_comment("Kubernetes service lb portal"),
            *_match("KUBE-LOAD-BALANCER", family, "dst,dst"),
            "-j",
            "KUBE-LOAD-BALANCER",
        ),
        ("-m", "addrtype", "--dst-type", "LOCAL", "-j", "KUBE-NODE-PORT"),
        (*_match("KUBE-CLUSTER-IP", family, "dst,dst"), "-j", "ACCEPT"),
        (*_match("KUBE-LOAD-BALANCER", family, "dst,dst"), "-j", "ACCEPT"),
    ]
    return rules


def _node_port(family: IPFamily) -> list[Rule]:
    rules: list[Rule] = []
    for protocol in ("TCP", "UDP"):
        lower = protocol.lower()
        rules += [
            (
                "-p",
                lower,
                *_match(f"KUBE-NODE-PORT-LOCAL-{protocol}", family, "dst"),
                "-j",
                "RETURN",
            ),
            (
                "-p",
                lower,
                *_match(f"KUBE-NODE-PORT-{protocol}", family, "dst"),
                "-j",
                "KUBE-MARK-MASQ",
            ),
        ]
    rules += [
        (
            "-p",
            "sctp",
            *_match("KUBE-NODE-PORT-LOCAL-SCTP-HASH", family, "dst,dst"),
            "-j",
            "RETURN",
        ),
        (
            "-p",
            "sctp",
            *_match("KUBE-NODE-PORT-SCTP-HASH", family, "dst,dst"),
            "-j",
            "KUBE-MARK-MASQ",
        ),
    ]
    return rules


def build_iptables(settings: Settings) -> tuple[IptablesRuleset, ...]:
    rulesets: list[IptablesRuleset] = []
    for family in IPFamily:
        cidrs = [c for c in settings.cluster_cidr if IPFamily.of(c) is family]
        nat = {
            "KUBE-SERVICES": tuple(_services(family, settings, cidrs)),
            "KUBE-POSTROUTING": (
                (
                    *_comment(
                        "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose"
                    ),
                    *_match("KUBE-LOOP-BACK", family, "dst,dst,src"),
                    "-j",
                    "MASQUERADE",
                ),
                ("-m", "mark", "!", "--mark", MASQ_MARK, "-j", "RETURN"),
                ("-j", "MARK", "--xor-mark", "0x4000"),
                (
                    *_comment("kubernetes service traffic requiring SNAT"),
                    "-j",
                    "MASQUERADE",
                    "--random-fully",
                ),
            ),
            "KUBE-MARK-MASQ": (("-j", "MARK", "--or-mark", "0x4000"),),
            "KUBE-NODE-PORT": tuple(_node_port(family)),
            "KUBE-LOAD-BALANCER": (
                (*_match("KUBE-LOAD-BALANCER-LOCAL", family, "dst,dst"), "-j", "RETURN"),
                ("-j", "KUBE-MARK-MASQ"),
            ),
        }
        filter_table = {
            "KUBE-FORWARD": (
                ("-m", "conntrack", "--ctstate", "INVALID", "-j", "DROP"),
                (
                    *_comment("kubernetes forwarding rules"),
                    "-m",
                    "mark",
                    "--mark",
                    MASQ_MARK,
                    "-j",
                    "ACCEPT",
                ),
                (
                    *_comment("kubernetes forwarding conntrack rule"),
                    "-m",
                    "conntrack",
                    "--ctstate",
                    "RELATED,ESTABLISHED",
                    "-j",
                    "ACCEPT",
                ),
            ),
        }
        jumps = (
            IptablesJump("nat", "PREROUTING", "KUBE-SERVICES", "kubernetes service portals"),
            IptablesJump("nat", "OUTPUT", "KUBE-SERVICES", "kubernetes service portals"),
            IptablesJump("nat", "POSTROUTING", "KUBE-POSTROUTING", "kubernetes postrouting rules"),
            IptablesJump("filter", "FORWARD", "KUBE-FORWARD", "kubernetes forwarding rules"),
        )
        rulesets.append(IptablesRuleset(family, {"nat": nat, "filter": filter_table}, jumps))
    return tuple(rulesets)
