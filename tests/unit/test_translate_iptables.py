from __future__ import annotations

import ipaddress

from ipvsproxy.model import IPFamily
from ipvsproxy.translate import Settings
from tests.unit.test_translate_rules import run


def test_one_ruleset_per_family_matching_that_familys_sets() -> None:
    state = run([])
    assert [r.family for r in state.iptables] == [IPFamily.IPV4, IPFamily.IPV6]
    v6_rules = [" ".join(rule) for rule in state.iptables[1].chains["nat"]["KUBE-POSTROUTING"]]
    assert any("KUBE-6-LOOP-BACK dst,dst,src" in rule for rule in v6_rules)


def test_cluster_cidr_masquerades_traffic_from_outside_it() -> None:
    cidr = ipaddress.ip_network("10.244.0.0/16")
    state = run([], Settings(cluster_cidr=(cidr,)))
    services = [" ".join(rule) for rule in state.iptables[0].chains["nat"]["KUBE-SERVICES"]]
    assert services[0].endswith("KUBE-CLUSTER-IP dst,dst ! -s 10.244.0.0/16 -j KUBE-MARK-MASQ")
    v6 = [" ".join(rule) for rule in state.iptables[1].chains["nat"]["KUBE-SERVICES"]]
    assert not any("10.244.0.0/16" in rule for rule in v6)


def test_masquerade_all_marks_every_cluster_ip_packet() -> None:
    state = run([], Settings(masquerade_all=True))
    first = state.iptables[0].chains["nat"]["KUBE-SERVICES"][0]
    assert first[-4:] == ("KUBE-CLUSTER-IP", "dst,dst", "-j", "KUBE-MARK-MASQ")
