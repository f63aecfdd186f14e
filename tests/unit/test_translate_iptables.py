from __future__ import annotations

import ipaddress
import shlex
from pathlib import Path
from typing import Any

import pytest

from ipvsproxy.cluster.parse import snapshot_from_objects
from ipvsproxy.cluster.source import load_snapshot
from ipvsproxy.model import DesiredState, IPFamily, IptablesRuleset
from ipvsproxy.translate import LocalDetectMode, Settings, translate
from tests.unit.test_translate_rules import NODE, run, svc

EXAMPLE = Path(__file__).parents[2] / "examples" / "cluster.yaml"
CLUSTER_CIDR = ipaddress.ip_network("10.244.0.0/16")


def lines(ruleset: IptablesRuleset, table: str, chain: str) -> list[str]:
    """Rules as iptables-save prints them (after ``-A CHAIN``), quoting only comments."""
    return [
        " ".join(shlex.quote(arg) if " " in arg else arg for arg in rule)
        for rule in ruleset.chains[table][chain]
    ]


def services(state: DesiredState, family: int = 0) -> list[str]:
    return lines(state.iptables[family], "nat", "KUBE-SERVICES")


def test_example_cluster_rules_line_by_line() -> None:
    snapshot, _ = load_snapshot(EXAMPLE, "node-a")
    v4 = translate(snapshot, Settings(cluster_cidr=(CLUSTER_CIDR,))).iptables[0]
    assert lines(v4, "nat", "KUBE-SERVICES") == [
        "-s 127.0.0.0/8 -j RETURN",
        "-m comment --comment 'Kubernetes service lb portal'"
        " -m set --match-set KUBE-LOAD-BALANCER dst,dst -j KUBE-LOAD-BALANCER",
        "! -s 10.244.0.0/16 -m comment --comment"
        " 'Kubernetes service cluster ip + port for masquerade purpose'"
        " -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ",
        "-m addrtype --dst-type LOCAL -j KUBE-NODE-PORT",
        "-m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT",
        "-m set --match-set KUBE-LOAD-BALANCER dst,dst -j ACCEPT",
    ]
    assert lines(v4, "nat", "KUBE-POSTROUTING") == [
        "-m comment --comment"
        " 'Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose'"
        " -m set --match-set KUBE-LOOP-BACK dst,dst,src -j MASQUERADE",
        "-m mark ! --mark 0x4000/0x4000 -j RETURN",
        "-j MARK --set-xmark 0x4000/0x0",
        "-m comment --comment 'kubernetes service traffic requiring SNAT'"
        " -j MASQUERADE --random-fully",
    ]
    assert lines(v4, "nat", "KUBE-NODE-PORT") == [
        "-p tcp -m comment --comment"
        " 'Kubernetes nodeport TCP port with externalTrafficPolicy=local'"
        " -m set --match-set KUBE-NODE-PORT-LOCAL-TCP dst -j RETURN",
        "-p tcp -m comment --comment 'Kubernetes nodeport TCP port for masquerade purpose'"
        " -m set --match-set KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ",
    ]
    assert lines(v4, "nat", "KUBE-LOAD-BALANCER") == [
        "-m comment --comment"
        " 'Kubernetes service load balancer ip + port with externalTrafficPolicy=local'"
        " -m set --match-set KUBE-LOAD-BALANCER-LOCAL dst,dst -j RETURN",
        "-j KUBE-MARK-MASQ",
    ]
    assert lines(v4, "nat", "KUBE-MARK-MASQ") == ["-j MARK --set-xmark 0x4000/0x4000"]
    assert lines(v4, "filter", "KUBE-FORWARD") == [
        "-m comment --comment 'kubernetes forwarding rules' -m mark --mark 0x4000/0x4000 -j ACCEPT",
        "-m comment --comment 'kubernetes forwarding conntrack rule'"
        " -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
    ]
    assert lines(v4, "filter", "KUBE-NODE-PORT") == [
        "-m comment --comment 'Kubernetes health check node port'"
        " -m set --match-set KUBE-HEALTH-CHECK-NODE-PORT dst -j ACCEPT"
    ]
    assert lines(v4, "filter", "KUBE-PROXY-FIREWALL") == []
    assert lines(v4, "filter", "KUBE-SOURCE-RANGES-FIREWALL") == ["-j DROP"]
    assert lines(v4, "filter", "KUBE-IPVS-FILTER") == [
        "-m set --match-set KUBE-LOAD-BALANCER dst,dst -j RETURN",
        "-m set --match-set KUBE-CLUSTER-IP dst,dst -j RETURN",
        "-m set --match-set KUBE-EXTERNAL-IP dst,dst -j RETURN",
        "-m set --match-set KUBE-EXTERNAL-IP-LOCAL dst,dst -j RETURN",
        "-m set --match-set KUBE-HEALTH-CHECK-NODE-PORT dst -j RETURN",
        "-m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst"
        " -j REJECT --reject-with icmp-port-unreachable",
    ]
    assert lines(v4, "filter", "KUBE-IPVS-OUT-FILTER") == []


def test_jumps_from_the_built_in_chains_stand_in_kube_proxys_order() -> None:
    """kube-proxy prepends its jumps one by one; each chain holds them in the order that
    leaves (pinned by the differential run: docs/kube-proxy-differences.md)."""
    jumps = run([]).iptables[0].jumps
    by_chain: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for j in jumps:
        by_chain.setdefault((j.table, j.chain), []).append((j.target, j.comment))
    assert by_chain == {
        ("filter", "OUTPUT"): [("KUBE-IPVS-OUT-FILTER", "kubernetes ipvs access filter")],
        ("filter", "INPUT"): [
            ("KUBE-IPVS-FILTER", "kubernetes ipvs access filter"),
            ("KUBE-PROXY-FIREWALL", "kube-proxy firewall rules"),
            ("KUBE-NODE-PORT", "kubernetes health check rules"),
        ],
        ("filter", "FORWARD"): [
            ("KUBE-PROXY-FIREWALL", "kube-proxy firewall rules"),
            ("KUBE-FORWARD", "kubernetes forwarding rules"),
        ],
        ("nat", "POSTROUTING"): [("KUBE-POSTROUTING", "kubernetes postrouting rules")],
        ("nat", "PREROUTING"): [("KUBE-SERVICES", "kubernetes service portals")],
        ("nat", "OUTPUT"): [("KUBE-SERVICES", "kubernetes service portals")],
    }


def test_one_ruleset_per_family_matching_that_familys_sets() -> None:
    state = run([svc({"clusterIPs": ["fd00::1"]})])
    assert [r.family for r in state.iptables] == [IPFamily.IPV4, IPFamily.IPV6]
    v6 = state.iptables[1]
    assert services(state, 1)[0] == "-s ::1/128 -j RETURN"
    assert "-m set --match-set KUBE-6-CLUSTER-IP dst,dst -j ACCEPT" in services(state, 1)
    assert lines(v6, "filter", "KUBE-IPVS-FILTER")[-1] == (
        "-m conntrack --ctstate NEW -m set --match-set KUBE-6-IPVS-IPS dst"
        " -j REJECT --reject-with icmp6-port-unreachable"
    )
    assert not any("CLUSTER-IP" in rule for rule in services(state, 0))


CLUSTER_IP_MASQ = (
    "-m comment --comment 'Kubernetes service cluster ip + port for masquerade purpose'"
    " -m set --match-set KUBE-CLUSTER-IP"
)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        # --masquerade-all: every packet to a cluster IP, and nothing else
        (
            Settings(masquerade_all=True, cluster_cidr=(CLUSTER_CIDR,)),
            f"{CLUSTER_IP_MASQ} dst,dst -j KUBE-MARK-MASQ",
        ),
        # --cluster-cidr: traffic from outside the pod network
        (
            Settings(cluster_cidr=(CLUSTER_CIDR, ipaddress.ip_network("10.245.0.0/16"))),
            f"! -s 10.244.0.0/16 {CLUSTER_IP_MASQ} dst,dst -j KUBE-MARK-MASQ",
        ),
        # neither: the node's own traffic sourced from a service IP
        (Settings(), f"{CLUSTER_IP_MASQ} src,dst -j KUBE-MARK-MASQ"),
        # --detect-local-mode=BridgeInterface / InterfaceNamePrefix
        (
            Settings(detect_local_mode=LocalDetectMode.BRIDGE_INTERFACE, bridge_interface="cni0"),
            f"! -i cni0 {CLUSTER_IP_MASQ} dst,dst -j KUBE-MARK-MASQ",
        ),
        (
            Settings(
                detect_local_mode=LocalDetectMode.INTERFACE_NAME_PREFIX,
                interface_name_prefix="veth",
                cluster_cidr=(CLUSTER_CIDR,),
            ),
            f"! -i veth+ {CLUSTER_IP_MASQ} dst,dst -j KUBE-MARK-MASQ",
        ),
        # a cluster CIDR of the other family does not detect this one's local traffic
        (
            Settings(cluster_cidr=(ipaddress.ip_network("fd10::/64"),)),
            f"{CLUSTER_IP_MASQ} src,dst -j KUBE-MARK-MASQ",
        ),
    ],
)
def test_cluster_ip_masquerade_rule(flags: Settings, expected: str) -> None:
    rules = services(run([svc({})], flags))
    assert [rule for rule in rules if "KUBE-MARK-MASQ" in rule] == [expected]


def test_set_rules_only_while_their_set_has_members() -> None:
    rules = services(run([]))
    assert rules == [
        "-s 127.0.0.0/8 -j RETURN",
        "-m addrtype --dst-type LOCAL -j KUBE-NODE-PORT",
    ]


def test_external_ips_masquerade_and_accept_from_off_the_machine() -> None:
    matched = (
        "-m comment --comment"
        " 'Kubernetes service external ip + port for masquerade and filter purpose'"
        " -m set --match-set KUBE-EXTERNAL-IP dst,dst"
    )
    rules = services(run([svc({"externalIPs": ["198.51.100.1"]})]))
    assert [rule for rule in rules if "KUBE-EXTERNAL-IP" in rule] == [
        f"{matched} -j KUBE-MARK-MASQ",
        f"{matched} -m physdev ! --physdev-is-in -m addrtype ! --src-type LOCAL -j ACCEPT",
        f"{matched} -m addrtype --dst-type LOCAL -j ACCEPT",
    ]


def test_local_external_ips_are_accepted_but_not_masqueraded() -> None:
    service = svc({"externalIPs": ["198.51.100.1"], "externalTrafficPolicy": "Local"})
    rules = [rule for rule in services(run([service])) if "EXTERNAL-IP" in rule]
    assert len(rules) == 2
    assert all(rule.endswith("-j ACCEPT") and "KUBE-EXTERNAL-IP-LOCAL" in rule for rule in rules)


LB: dict[str, Any] = {"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.1"}]}}}


def test_source_ranges_firewall_chains() -> None:
    service = svc({"type": "LoadBalancer", "loadBalancerSourceRanges": ["10.0.0.0/8"]}) | LB
    v4 = run([service]).iptables[0]
    assert lines(v4, "filter", "KUBE-PROXY-FIREWALL") == [
        "-m comment --comment"
        " 'Kubernetes service load balancer ip + port for load balancer with sourceRange'"
        " -m set --match-set KUBE-LOAD-BALANCER-FW dst,dst -j KUBE-SOURCE-RANGES-FIREWALL"
    ]
    assert lines(v4, "filter", "KUBE-SOURCE-RANGES-FIREWALL") == [
        "-m comment --comment"
        " 'Kubernetes service load balancer ip + port + source cidr for packet filter purpose'"
        " -m set --match-set KUBE-LOAD-BALANCER-SOURCE-CIDR dst,dst,src -j RETURN",
        "-j DROP",
    ]
    # the node (192.168.0.1) is outside the ranges: its own traffic to the LB IP is dropped
    assert lines(v4, "filter", "KUBE-IPVS-OUT-FILTER") == [
        "-s 203.0.113.1/32 -m ipvs --vproto 6 --vaddr 203.0.113.1 --vport 80 -j DROP"
    ]


def test_node_inside_source_ranges_may_reach_the_load_balancer() -> None:
    service = svc({"type": "LoadBalancer", "loadBalancerSourceRanges": ["192.168.0.0/16"]}) | LB
    v4 = run([service]).iptables[0]
    assert lines(v4, "filter", "KUBE-IPVS-OUT-FILTER") == []
    assert lines(v4, "filter", "KUBE-SOURCE-RANGES-FIREWALL")[1] == (
        "-m comment --comment"
        " 'Kubernetes service load balancer ip + port + source IP for packet filter purpose'"
        " -m set --match-set KUBE-LOAD-BALANCER-SOURCE-IP dst,dst,src -j RETURN"
    )


def test_node_port_rules_per_protocol_local_first() -> None:
    service = svc(
        {
            "type": "NodePort",
            "externalTrafficPolicy": "Local",
            "ports": [
                {"name": "u", "port": 53, "protocol": "UDP", "nodePort": 30053},
                {"name": "s", "port": 80, "protocol": "SCTP", "nodePort": 30080},
            ],
        }
    )
    rules = lines(run([service]).iptables[0], "nat", "KUBE-NODE-PORT")
    assert [rule.split(" --match-set ")[1] for rule in rules] == [
        "KUBE-NODE-PORT-LOCAL-UDP dst -j RETURN",
        "KUBE-NODE-PORT-UDP dst -j KUBE-MARK-MASQ",
        "KUBE-NODE-PORT-LOCAL-SCTP-HASH dst,dst -j RETURN",
        "KUBE-NODE-PORT-SCTP-HASH dst,dst -j KUBE-MARK-MASQ",
    ]
    assert rules[2].startswith("-p sctp ")


def test_ipv6_node_outside_source_ranges_is_dropped_with_a_128_prefix() -> None:
    service = svc(
        {
            "type": "LoadBalancer",
            "clusterIPs": ["fd00::1"],
            "loadBalancerSourceRanges": ["2001:db8:1::/48"],
            "ports": [{"name": "p", "port": 53, "protocol": "UDP"}],
        }
    ) | {"status": {"loadBalancer": {"ingress": [{"ip": "2001:db8::50"}]}}}
    v6 = run([service]).iptables[1]
    assert lines(v6, "filter", "KUBE-IPVS-OUT-FILTER") == [
        "-s 2001:db8::50/128 -m ipvs --vproto 17 --vaddr 2001:db8::50 --vport 53 -j DROP"
    ]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"podCIDRs": ["10.244.3.0/24", "fd10:0:0:3::/64"]}, "! -s 10.244.3.0/24 "),
        ({"podCIDR": "10.244.7.0/24"}, "! -s 10.244.7.0/24 "),
        ({}, ""),  # no pod CIDR yet: the node's own service-IP traffic, as without a detector
    ],
)
def test_node_cidr_local_detection_uses_this_nodes_pod_cidr(
    spec: dict[str, Any], expected: str
) -> None:
    node = NODE | {"spec": spec}
    snapshot, _ = snapshot_from_objects([node, svc({})], "node-a")
    state = translate(snapshot, Settings(detect_local_mode=LocalDetectMode.NODE_CIDR))
    flags = "src,dst" if not expected else "dst,dst"
    assert [rule for rule in services(state) if "KUBE-MARK-MASQ" in rule] == [
        f"{expected}{CLUSTER_IP_MASQ} {flags} -j KUBE-MARK-MASQ"
    ]


@pytest.mark.parametrize(("bit", "mark"), [(0, "0x1"), (14, "0x4000"), (31, "0x80000000")])
def test_masquerade_bit_sets_every_mark_as_kube_proxy(bit: int, mark: str) -> None:
    for ruleset in run([svc({})], Settings(masquerade_bit=bit)).iptables:
        assert lines(ruleset, "nat", "KUBE-MARK-MASQ") == [f"-j MARK --set-xmark {mark}/{mark}"]
        assert lines(ruleset, "nat", "KUBE-POSTROUTING")[-3:-1] == [
            f"-m mark ! --mark {mark}/{mark} -j RETURN",
            f"-j MARK --set-xmark {mark}/0x0",
        ]
        forward = lines(ruleset, "filter", "KUBE-FORWARD")[0]
        assert forward.endswith(f"-m mark --mark {mark}/{mark} -j ACCEPT")
