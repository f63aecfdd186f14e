"""A node that kube-proxy's IPVS mode programmed, adopted by a first sync that starts cold.

kube-proxy keeps its state under the names we use, so the node is stood up here by one
reconciler (kube-proxy's twin: same translation), plus what kube-proxy does that we do not:
NodePorts on an address of the node that its Node object does not list. A second reconciler,
a fresh process as ``ipvsproxy run`` starts after kube-proxy, then adopts it.
"""

from __future__ import annotations

import ipaddress
from dataclasses import replace
from pathlib import Path

import pytest

from ipvsproxy.cluster.source import load_snapshot
from ipvsproxy.kernel.testing import FakeKernel
from ipvsproxy.model import (
    AddRealServer,
    AddVirtualServer,
    BindAddress,
    ClusterSnapshot,
    DeleteVirtualServer,
    DesiredState,
    IPVSOp,
    RealServer,
    RealServerKey,
    ReplaceIPSet,
    TransportProtocol,
    UpdateVirtualServer,
    VirtualServer,
    VirtualServerKey,
)
from ipvsproxy.reconcile.reconciler import Reconciler
from ipvsproxy.translate import Settings, translate

NODE_IP = ipaddress.ip_address("192.168.10.11")
# On a second interface, in no Node object address: kube-proxy serves NodePorts on it,
# we do not (the Node object's addresses are ours to serve).
UNLISTED = ipaddress.ip_address("10.0.5.11")
WEB_NODE_PORT = 30080


def snapshot(*node_addresses: str) -> ClusterSnapshot:
    loaded, _ = load_snapshot(Path("examples/cluster.yaml"), "node-a")
    assert loaded.node is not None
    node = replace(loaded.node, addresses=(*loaded.node.addresses, *node_addresses))
    return replace(loaded, node=node)


def kube_proxy_node() -> tuple[FakeKernel, DesiredState]:
    """A node as kube-proxy left it, and what kube-proxy programmed."""
    fake = FakeKernel()
    fake.addresses.ensure_interface("eth0")
    fake.addresses.ensure_interface("eth1")
    fake.addresses.apply("eth0", [BindAddress(NODE_IP)])
    fake.addresses.apply("eth1", [BindAddress(UNLISTED)])
    kube_proxy = translate(snapshot(str(UNLISTED)), Settings())
    assert Reconciler(fake.kernel()).sync(kube_proxy).ok
    return fake, kube_proxy


def ipvs_ops(ops: tuple[object, ...]) -> list[object]:
    return [op for op in ops if isinstance(op, IPVSOp)]


def test_a_node_programmed_as_we_would_is_adopted_without_one_ipvs_write() -> None:
    fake = FakeKernel()
    fake.addresses.ensure_interface("eth0")
    fake.addresses.apply("eth0", [BindAddress(NODE_IP)])
    state = translate(snapshot(), Settings())
    Reconciler(fake.kernel()).sync(state)
    table = fake.ipvs.dump()

    adopted = Reconciler(fake.kernel()).sync(state)

    assert adopted.ok and adopted.plan.changes() == () and adopted.writes == 0
    assert fake.ipvs.dump() == table


def test_kube_proxy_s_node_ports_the_cluster_no_longer_gives_us_go_and_nothing_else() -> None:
    fake, kube_proxy = kube_proxy_node()
    extra = {key for key in kube_proxy.virtual_servers if key.address == UNLISTED}
    assert {key.port for key in extra} == {WEB_NODE_PORT, 31443}

    adopted = Reconciler(fake.kernel()).sync(translate(snapshot(), Settings()))

    assert adopted.ok
    assert ipvs_ops(adopted.applied) == [DeleteVirtualServer(key) for key in sorted(
        extra, key=VirtualServerKey.sort_key
    )]  # fmt: skip
    assert set(fake.ipvs.dump()) == set(kube_proxy.virtual_servers) - extra


@pytest.mark.parametrize(
    "foreign",
    [
        # on a node address, on a port no NodePort set holds
        VirtualServerKey(TransportProtocol.TCP, UNLISTED, 9000),
        # a NodePort's number, but UDP: the TCP set does not cover it
        VirtualServerKey(TransportProtocol.UDP, UNLISTED, WEB_NODE_PORT),
        # a NodePort's number on an address that is not the node's
        VirtualServerKey(TransportProtocol.TCP, ipaddress.ip_address("192.0.2.7"), WEB_NODE_PORT),
    ],
    ids=["other-port", "other-protocol", "not-local"],
)
def test_a_virtual_server_no_proxy_made_is_left_alone(foreign: VirtualServerKey) -> None:
    fake, _ = kube_proxy_node()
    real = RealServer(RealServerKey(ipaddress.ip_address("192.0.2.99"), 80))
    fake.ipvs.apply([AddVirtualServer(VirtualServer(foreign)), AddRealServer(foreign, real)])

    adopted = Reconciler(fake.kernel()).sync(translate(snapshot(), Settings()))

    assert adopted.ok
    assert DeleteVirtualServer(foreign) not in adopted.applied
    assert foreign in fake.ipvs.dump()


def test_kube_proxy_s_external_ip_on_the_node_s_own_address_goes_by_its_ipset_entry() -> None:
    """kube-proxy serves an external IP that is the node's own address, never binding it on
    kube-ipvs0; we refuse one (it would hand the node's own port to the Service), so only
    KUBE-EXTERNAL-IP says its virtual server was a proxy's."""
    fake, _ = kube_proxy_node()
    key = VirtualServerKey(TransportProtocol.TCP, UNLISTED, 80)
    fake.ipvs.apply([AddVirtualServer(VirtualServer(key))])
    external = fake.ipsets.list_sets()["KUBE-EXTERNAL-IP"]
    fake.ipsets.plant(replace(external, entries=external.entries | {f"{UNLISTED},tcp:80"}))
    with_ip = snapshot(str(UNLISTED))
    web = next(key for key in with_ip.services if key.name == "web")
    services = dict(with_ip.services)
    services[web] = replace(services[web], external_ips=(str(UNLISTED),))
    refused = translate(replace(with_ip, services=services), Settings())
    assert key not in refused.virtual_servers

    adopted = Reconciler(fake.kernel()).sync(refused)

    assert adopted.ok and DeleteVirtualServer(key) in adopted.applied
    assert key not in fake.ipvs.dump()


def test_kube_proxy_s_scheduler_is_changed_in_place_never_recreated() -> None:
    fake, kube_proxy = kube_proxy_node()

    adopted = Reconciler(fake.kernel()).sync(translate(snapshot(), Settings(scheduler="wrr")))

    kinds = {type(op) for op in ipvs_ops(adopted.applied)}
    assert adopted.ok and UpdateVirtualServer in kinds
    assert AddVirtualServer not in kinds
    assert all(
        op.key.address == UNLISTED for op in adopted.applied if isinstance(op, DeleteVirtualServer)
    )
    assert set(fake.ipvs.dump()) == {k for k in kube_proxy.virtual_servers if k.address != UNLISTED}


def test_a_set_of_kube_proxy_s_with_other_options_is_swapped_for_ours_while_rules_use_it() -> None:
    fake, _ = kube_proxy_node()
    name = "KUBE-CLUSTER-IP"
    theirs = fake.ipsets.list_sets()[name]
    fake.ipsets.plant(replace(theirs, spec=replace(theirs.spec, options=("maxelem 1024",))))
    fake.ipsets.hold(name)  # the iptables rules match it: it can never be destroyed

    adopted = Reconciler(fake.kernel()).sync(translate(snapshot(), Settings()))

    replaced = [op for op in adopted.applied if isinstance(op, ReplaceIPSet)]
    assert adopted.ok and [op.content.spec.name for op in replaced] == [name]
    assert fake.ipsets.list_sets()[name] == theirs
    assert Reconciler(fake.kernel()).plan(translate(snapshot(), Settings())).ipsets == ()
