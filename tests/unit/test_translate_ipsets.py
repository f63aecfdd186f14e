from __future__ import annotations

from pathlib import Path

from ipvsproxy.cluster.source import load_snapshot
from ipvsproxy.model import IPFamily
from ipvsproxy.translate import Settings, translate

EXAMPLE = Path(__file__).parents[2] / "examples" / "cluster.yaml"


def test_example_cluster_ipsets() -> None:
    snapshot, _ = load_snapshot(EXAMPLE, "node-a")
    ipsets = translate(snapshot, Settings()).ipsets
    filled = {name: set(content.entries) for name, content in ipsets.items() if content.entries}
    assert filled == {
        "KUBE-CLUSTER-IP": {
            "10.96.0.10,tcp:53",
            "10.96.0.10,tcp:9153",
            "10.96.0.10,udp:53",
            "10.96.12.5,tcp:80",
            "10.96.40.1,tcp:443",
        },
        "KUBE-HEALTH-CHECK-NODE-PORT": {"32000"},
        "KUBE-LOAD-BALANCER": {"203.0.113.10,tcp:443"},
        "KUBE-LOAD-BALANCER-LOCAL": {"203.0.113.10,tcp:443"},
        "KUBE-LOOP-BACK": {
            "10.244.0.20,tcp:8080,10.244.0.20",
            "10.244.0.30,tcp:8443,10.244.0.30",
            "10.244.0.5,tcp:53,10.244.0.5",
            "10.244.0.5,tcp:9153,10.244.0.5",
            "10.244.0.5,udp:53,10.244.0.5",
        },
        "KUBE-NODE-PORT-LOCAL-TCP": {"31443"},
        "KUBE-NODE-PORT-TCP": {"30080", "31443"},
    }


def test_every_set_exists_for_both_families_with_kube_proxy_types() -> None:
    snapshot, _ = load_snapshot(EXAMPLE, "node-a")
    ipsets = translate(snapshot, Settings()).ipsets
    assert ipsets["KUBE-6-CLUSTER-IP"].spec.family is IPFamily.IPV6
    assert ipsets["KUBE-LOOP-BACK"].spec.set_type == "hash:ip,port,ip"
    assert ipsets["KUBE-NODE-PORT-UDP"].spec.set_type == "bitmap:port"
    assert ipsets["KUBE-NODE-PORT-SCTP-HASH"].spec.set_type == "hash:ip,port"
    assert len(ipsets) == 26
