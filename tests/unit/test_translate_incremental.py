"""The incremental translation against the reference: ``translate`` of the same snapshot."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ipvsproxy.cluster.parse import parse_endpoint_slice, parse_service, snapshot_from_objects
from ipvsproxy.model import (
    ClusterSnapshot,
    DesiredChange,
    DesiredState,
    EndpointSlice,
    ObjectKey,
    Service,
    SkipReason,
)
from ipvsproxy.translate import ServiceCache, Settings, translate
from ipvsproxy.translate.incremental import IncrementalTranslation
from tests.unit.test_translate_properties import endpoint_slice, service
from tests.unit.test_translate_rules import NODE, eps, svc, vs

AGES = st.sampled_from([None, "2024-01-01T00:00:00Z", "2025-06-01T00:00:00Z"])
NAMES = "stuv"


def _subset(*items: Any, min_size: int = 0) -> st.SearchStrategy[list[Any]]:
    return st.lists(st.sampled_from(items), unique_by=repr, min_size=min_size, max_size=len(items))


# A small world, so that services contest virtual servers and endpoints match ports.
realistic_service = st.builds(
    lambda name, created, spec, ingress, labels: {
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "labels": labels,
            **({"creationTimestamp": created} if created else {}),
        },
        "spec": spec,
        "status": {"loadBalancer": {"ingress": [{"ip": ip} for ip in ingress]}},
    },
    st.sampled_from(NAMES),
    AGES,
    st.fixed_dictionaries(
        {
            "clusterIPs": st.sampled_from(
                [["10.96.0.1"], ["10.96.0.2"], ["10.96.0.1", "fd00::1"], ["None"], ["192.168.0.1"]]
            ),
            "ports": _subset(
                {"name": "a", "port": 80, "protocol": "TCP", "nodePort": 30001},
                {"name": "b", "port": 53, "protocol": "UDP", "nodePort": 30002},
                {"name": "c", "port": 80, "protocol": "SCTP"},
                # Another service's health check, a UDP port beside one, the kubelet's port,
                # one outside the default range.
                {"name": "d", "port": 81, "protocol": "TCP", "nodePort": 30100},
                {"name": "e", "port": 82, "protocol": "UDP", "nodePort": 30101},
                {"name": "f", "port": 83, "protocol": "TCP", "nodePort": 10250},
                {"name": "g", "port": 84, "protocol": "TCP", "nodePort": 29999},
                min_size=1,
            ),
        },
        optional={
            "type": st.sampled_from(["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"]),
            "externalIPs": _subset("203.0.113.1", "10.96.0.1", "192.168.0.1", "fd00::9"),
            "externalTrafficPolicy": st.sampled_from(["Local", "Cluster"]),
            "internalTrafficPolicy": st.sampled_from(["Local", "Cluster"]),
            "sessionAffinity": st.sampled_from(["ClientIP", "None"]),
            "loadBalancerSourceRanges": _subset("192.168.0.0/16", "10.0.0.0/8", "x"),
            "healthCheckNodePort": st.sampled_from([30100, 30101, 30001, 10256, 40000]),
        },
    ),
    _subset("203.0.113.1", "203.0.113.2", "192.168.0.1"),
    st.sampled_from([{}, {"service.kubernetes.io/service-proxy-name": "p"}]),
)
realistic_slice = st.builds(
    eps,
    st.lists(
        st.fixed_dictionaries(
            {
                "addresses": st.sampled_from(
                    [["10.1.0.1"], ["10.1.0.2"], ["10.1.0.3"], ["fd01::1"]]
                ),
                "nodeName": st.sampled_from(["node-a", "node-b"]),
                "conditions": st.fixed_dictionaries({"ready": st.booleans()}),
            }
        ),
        min_size=1,
        max_size=3,
    ),
    service=st.sampled_from(NAMES),
    name=st.sampled_from(["e1", "e2", "e3"]),
    address_type=st.sampled_from(["IPv4", "IPv4", "IPv6", "FQDN"]),
    ports=_subset(
        {"name": "a", "port": 8080, "protocol": "TCP"},
        {"name": "b", "port": 5353, "protocol": "UDP"},
        {"name": "c", "port": 9090, "protocol": "SCTP"},
        min_size=1,
    ),
)
# Load balancers whose node ports and health checks contest a few numbers of the node.
node_port_service = st.builds(
    lambda name, created, cluster_ip, ports, health_check: {
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": "ns",
            **({"creationTimestamp": created} if created else {}),
        },
        "spec": {
            "type": "LoadBalancer",
            "clusterIPs": [cluster_ip],
            "ports": ports,
            "externalTrafficPolicy": "Local",
            **({"healthCheckNodePort": health_check} if health_check else {}),
        },
    },
    st.sampled_from(NAMES),
    AGES,
    st.sampled_from(["10.96.0.1", "10.96.0.2", "fd00::1"]),
    _subset(
        {"name": "a", "port": 80, "protocol": "TCP", "nodePort": 30100},
        {"name": "b", "port": 80, "protocol": "UDP", "nodePort": 30100},
        {"name": "c", "port": 81, "protocol": "TCP", "nodePort": 30101},
        min_size=1,
    ),
    st.sampled_from([None, 30100, 30101]),
)
deletion = st.tuples(st.sampled_from(["Service", "EndpointSlice"]), st.sampled_from("stuv123"))
# Another node's addresses, as they may change: the external and ingress IPs above among them.
OTHER_NODE_ADDRESSES: tuple[list[str], ...] = (
    [],
    ["203.0.113.2"],
    ["203.0.113.1"],
    ["10.96.0.2", "fd00::9"],
)
node_change = st.tuples(st.just("Node"), st.sampled_from(range(len(OTHER_NODE_ADDRESSES))))
step = st.one_of(
    realistic_service,
    realistic_slice,
    realistic_slice,
    node_port_service,
    deletion,
    service,
    endpoint_slice,
)
SETTINGS = st.sampled_from(
    [Settings(), Settings(service_proxy_name="p"), Settings(node_port_range=(1, 65535))]
)


def comparable(state: DesiredState) -> DesiredState:
    """Rejections come in another order: compare them as a sorted list."""
    return replace(state, rejections=tuple(sorted(state.rejections, key=repr)))


def other_node(index: int) -> dict[str, Any]:
    addresses = OTHER_NODE_ADDRESSES[index]
    return {
        "kind": "Node",
        "metadata": {"name": "node-b"},
        "status": {"addresses": [{"type": "InternalIP", "address": a} for a in addresses]},
    }


def is_node_change(change: object) -> bool:
    return isinstance(change, tuple) and change[0] == "Node"


class Cluster:
    """A snapshot changed one object at a time, unchanged objects kept, as the informer does."""

    def __init__(self) -> None:
        self.snapshot, _ = snapshot_from_objects([NODE, other_node(1)], "node-a")
        self.services: dict[ObjectKey, Service] = {}
        self.slices: dict[ObjectKey, EndpointSlice] = {}

    def apply(
        self, change: dict[str, Any] | tuple[str, str] | tuple[str, int]
    ) -> tuple[ClusterSnapshot, set[ObjectKey], set[ObjectKey]]:
        """The snapshot with the change, and the Service and EndpointSlice keys it touched
        (none for a Node's: the whole snapshot is translated again then, as the daemon does)."""
        if isinstance(change, tuple) and isinstance(change[1], int):
            nodes, _ = snapshot_from_objects([NODE, other_node(change[1])], "node-a")
            self.snapshot = replace(self.snapshot, nodes_by_address=nodes.nodes_by_address)
            return self.snapshot, set(), set()
        if isinstance(change, tuple):
            kind, name = change
            key = ObjectKey("ns", name if kind == "Service" else f"e{name}")
            store: dict[ObjectKey, Any] = self.services if kind == "Service" else self.slices
            store.pop(key, None)
        else:
            kind = change["kind"]
            key = ObjectKey("ns", change["metadata"]["name"])
            if kind == "Service":
                self.services.pop(key, None)
                if (service := parse_service(change)[0]) is not None:
                    self.services[key] = service
            else:
                self.slices.pop(key, None)
                if (slice_ := parse_endpoint_slice(change)[0]) is not None:
                    self.slices[key] = slice_
        self.snapshot = replace(
            self.snapshot, services=dict(self.services), endpoint_slices=dict(self.slices)
        )
        if kind == "Service":
            return self.snapshot, {key}, set()
        return self.snapshot, set(), {key}


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=300)
@given(
    st.lists(step, max_size=10),
    st.lists(step | node_change, min_size=1, max_size=12),
    SETTINGS,
)
def test_every_update_equals_translating_the_whole_snapshot(
    start: list[Any], changes: list[Any], chosen: Settings
) -> None:
    """Kept and whole translations share one cache, as the daemon's do; a change of Node
    addresses rebuilds the kept one from that cache (the daemon's full sync)."""
    cluster = Cluster()
    for change in start:
        cluster.apply(change)
    cache = ServiceCache()
    incremental = IncrementalTranslation(chosen, cache)
    before = incremental.rebuild(cluster.snapshot)
    assert comparable(before) == comparable(translate(cluster.snapshot, chosen))
    for change in changes:
        if is_node_change(change):
            cluster.apply(change)
            assert translate(cluster.snapshot, chosen, cache) == translate(cluster.snapshot, chosen)
            before = incremental.rebuild(cluster.snapshot)
            assert comparable(before) == comparable(translate(cluster.snapshot, chosen))
            continue
        done = incremental.update(*cluster.apply(change))
        after = translate(cluster.snapshot, chosen)
        assert comparable(done.desired) == comparable(after)
        assert_change_between(before, after, done.change)
        before = after


def assert_change_between(before: DesiredState, after: DesiredState, change: DesiredChange) -> None:
    """The change says exactly what differs between the two states."""
    keys = before.virtual_servers.keys() | after.virtual_servers.keys()
    differing = {k for k in keys if before.virtual_servers.get(k) != after.virtual_servers.get(k)}
    assert change.virtual_servers == {k: before.virtual_servers.get(k) for k in differing}
    for name, content in after.ipsets.items():
        had = before.ipsets[name].entries
        assert change.added_entries.get(name, frozenset()) == content.entries - had
        assert change.removed_entries.get(name, frozenset()) == had - content.entries
    assert change.bound == after.bound_addresses - before.bound_addresses
    assert change.unbound == before.bound_addresses - after.bound_addresses
    assert change.iptables == (before.iptables != after.iptables)


def test_the_loser_of_a_contested_virtual_server_wins_it_when_the_winner_goes() -> None:
    old = svc({"clusterIP": "10.96.0.5"}, name="old")
    old["metadata"]["creationTimestamp"] = "2024-01-01T00:00:00Z"
    new = svc({"clusterIP": "10.96.0.5", "ports": [{"name": "p", "port": 80}]}, name="new")
    new["metadata"]["creationTimestamp"] = "2025-06-01T00:00:00Z"
    key = vs("TCP", "10.96.0.5", 80)
    cluster = Cluster()
    cluster.apply(old)
    incremental = IncrementalTranslation(Settings())
    first = incremental.rebuild(cluster.snapshot)
    # The newer service arrives: the older one keeps the virtual server, nothing changes.
    added = incremental.update(*cluster.apply(new))
    assert added.desired.virtual_servers[key].owner.service == ObjectKey("ns", "old")
    assert dict(added.change.virtual_servers) == {}
    [lost] = [r for r in added.desired.rejections if r.category is SkipReason.ADDRESS_CONFLICT]
    assert lost.object == "Service ns/new"
    # The older one goes: the newer one takes the virtual server over, its warning goes.
    gone = incremental.update(*cluster.apply(("Service", "old")))
    assert gone.desired.virtual_servers[key].owner.service == ObjectKey("ns", "new")
    assert gone.change.virtual_servers == {key: first.virtual_servers[key]}
    assert not [r for r in gone.desired.rejections if r.category is SkipReason.ADDRESS_CONFLICT]
    assert comparable(gone.desired) == comparable(translate(cluster.snapshot, Settings()))
    # It comes back, older: it wins again.
    back = incremental.update(*cluster.apply(old))
    assert back.desired.virtual_servers[key].owner.service == ObjectKey("ns", "old")
    assert comparable(back.desired) == comparable(translate(cluster.snapshot, Settings()))


def test_an_update_touches_only_what_changed() -> None:
    """Unchanged parts are the previous state's very objects: nothing was rebuilt for them."""
    cluster = Cluster()
    for index in range(20):
        cluster.apply(svc({"clusterIP": f"10.96.0.{index + 1}"}, name=f"s{index}"))
    incremental = IncrementalTranslation(Settings())
    first = incremental.rebuild(cluster.snapshot)
    renamed = svc({"clusterIP": "10.96.0.1", "ports": [{"port": 81}]}, name="s0")
    done = incremental.update(*cluster.apply(renamed))
    assert done.change.virtual_servers.keys() == {
        vs("TCP", "10.96.0.1", 80),
        vs("TCP", "10.96.0.1", 81),
    }
    assert done.change.added_entries == {"KUBE-CLUSTER-IP": frozenset({"10.96.0.1,tcp:81"})}
    assert done.change.removed_entries == {"KUBE-CLUSTER-IP": frozenset({"10.96.0.1,tcp:80"})}
    assert not done.change.bound and not done.change.unbound and not done.change.iptables
    assert done.desired.bound_addresses is first.bound_addresses
    assert done.desired.iptables is first.iptables
    assert done.desired.ipsets["KUBE-IPVS-IPS"] is first.ipsets["KUBE-IPVS-IPS"]


def test_a_snapshot_with_nothing_is_a_valid_start() -> None:
    empty = ClusterSnapshot(services={}, endpoint_slices={})
    incremental = IncrementalTranslation(Settings())
    assert incremental.rebuild(empty) == translate(empty, Settings())
