"""Generated garbage among a valid cluster never changes the valid services' plan."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ipvsproxy.cluster.parse import snapshot_from_objects
from ipvsproxy.cluster.source import load_objects
from ipvsproxy.model import DesiredState
from ipvsproxy.translate import Settings, translate
from ipvsproxy.translate.conflicts import API_ALLOCATED
from tests.unit.test_translate_rules import EXAMPLE

VALID_AGE = "2020-01-01T00:00:00Z"
GARBAGE_AGE = "2099-01-01T00:00:00Z"


def _valid_cluster() -> list[dict[str, Any]]:
    objects = copy.deepcopy(load_objects(EXAMPLE))
    for obj in objects:
        obj["metadata"]["creationTimestamp"] = VALID_AGE
    return objects


VALID = _valid_cluster()
# Addresses the valid cluster uses, and ones no proxy may bind. The valid load-balancer IP is
# left out of the garbage cluster IPs: an API-allocated address rightly wins over it.
CLUSTER_ADDRESSES = ["10.96.0.10", "10.96.12.5", "10.96.40.1", "192.168.10.11", "10.244.0.5"]
UNUSABLE = ["0.0.0.0", "127.0.0.1", "224.0.0.1", "169.254.169.254", "::", "fe80::1%eth0"]
ADDRESSES = [*CLUSTER_ADDRESSES, *UNUSABLE, "203.0.113.10", "fd00::1", "not-an-ip", ""]

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-2, 70000)
    | st.text(max_size=6)
    | st.sampled_from(ADDRESSES)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
addresses = st.sampled_from(ADDRESSES) | json_values
names = (
    st.sampled_from(["kube-dns", "web", "gateway", "x", "Bad Name", "a\n+ forged"]) | json_values
)
port = st.fixed_dictionaries(
    {},
    optional={
        "name": st.sampled_from(["dns", "dns-tcp", "metrics", "http", "https", "p"]) | json_values,
        "port": st.sampled_from([53, 80, 443, 9153, 0, 70000]) | json_values,
        "nodePort": st.sampled_from([30080, 31443, 32000]) | json_values,
        "protocol": st.sampled_from(["TCP", "UDP", "SCTP", "ICMP"]) | json_values,
    },
)
ingress_status = st.fixed_dictionaries(
    {
        "loadBalancer": st.fixed_dictionaries(
            {"ingress": st.lists(st.fixed_dictionaries({"ip": addresses}), max_size=2)}
        )
    }
)
# Services the API could hold: valid names and ports, addresses that collide with the cluster's.
plausible_service = st.fixed_dictionaries(
    {
        "kind": st.just("Service"),
        "metadata": st.fixed_dictionaries({"name": st.sampled_from(["kube-dns", "web", "a"])}),
        "spec": st.fixed_dictionaries(
            {
                "clusterIP": st.sampled_from(CLUSTER_ADDRESSES + UNUSABLE),
                "ports": st.lists(
                    st.fixed_dictionaries(
                        {
                            "port": st.sampled_from([53, 80, 443, 9153, 30080]),
                            "protocol": st.sampled_from(["TCP", "UDP"]),
                        },
                        optional={"nodePort": st.sampled_from([30080, 31443])},
                    ),
                    min_size=1,
                    max_size=2,
                    unique_by=lambda p: (p["port"], p["protocol"]),
                ).map(lambda ports: [{**p, "name": f"p{i}"} for i, p in enumerate(ports)]),
            },
            optional={
                "type": st.sampled_from(["NodePort", "LoadBalancer"]),
                "externalIPs": st.lists(st.sampled_from(ADDRESSES), max_size=2),
            },
        ),
    },
    optional={"status": ingress_status},
)
service = st.fixed_dictionaries(
    {
        "kind": st.just("Service"),
        "metadata": st.fixed_dictionaries({"name": names}) | json_values,
        "spec": st.fixed_dictionaries(
            {},
            optional={
                "type": st.sampled_from(["ClusterIP", "NodePort", "LoadBalancer", "Odd"]),
                "clusterIP": st.sampled_from(CLUSTER_ADDRESSES + UNUSABLE) | json_values,
                "clusterIPs": st.lists(st.sampled_from(CLUSTER_ADDRESSES + UNUSABLE), max_size=2),
                "externalIPs": st.lists(addresses, max_size=2) | json_values,
                "ports": st.lists(port, max_size=3) | json_values,
                "externalTrafficPolicy": st.sampled_from(["Local", "Cluster"]) | json_values,
                "sessionAffinity": st.sampled_from(["ClientIP", "None"]) | json_values,
            },
        )
        | json_values,
    },
    optional={"status": ingress_status | json_values},
)
endpoint_slice = st.fixed_dictionaries(
    {
        "kind": st.just("EndpointSlice"),
        "metadata": st.fixed_dictionaries(
            {"name": names, "labels": st.fixed_dictionaries({"kubernetes.io/service-name": names})}
        )
        | json_values,
        "addressType": st.sampled_from(["IPv4", "IPv6", "FQDN"]) | json_values,
        "endpoints": st.lists(
            st.fixed_dictionaries({"addresses": st.lists(addresses, max_size=2)}), max_size=3
        )
        | json_values,
        "ports": st.lists(port, max_size=2) | json_values,
    }
)
node = st.fixed_dictionaries(
    {
        "kind": st.just("Node"),
        "metadata": st.fixed_dictionaries({"name": names}) | json_values,
        "status": st.fixed_dictionaries(
            {
                "addresses": st.lists(
                    st.fixed_dictionaries({"type": st.just("InternalIP"), "address": addresses}),
                    max_size=2,
                )
            }
        )
        | json_values,
    }
)


def _quarantined(obj: Any) -> Any:
    """Garbage stays in its own namespace, younger than the cluster, off this node's name.

    Within those bounds it may claim any address: the rules decide, and must keep the valid
    services' virtual servers where they are.
    """
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
        return obj
    metadata = {**obj["metadata"], "namespace": "garbage", "creationTimestamp": GARBAGE_AGE}
    if obj.get("kind") == "Node":
        metadata["name"] = "garbage-node"
    return {**obj, "metadata": metadata}


def _plan(objects: list[Any]) -> DesiredState:
    snapshot, _ = snapshot_from_objects(objects, "node-a")
    return translate(snapshot, Settings())


BASELINE = _plan(VALID)
VALID_SERVICES = {wanted.owner.service for wanted in BASELINE.virtual_servers.values()}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(plausible_service | service | endpoint_slice | node | json_values, max_size=6),
    st.randoms(),
)
def test_garbage_never_changes_the_valid_services_plan(garbage: list[Any], shuffle: Any) -> None:
    """Save one thing: a Node (another node's, here) takes its addresses from the external
    and load-balancer IPs users write, never from what the API server allocates."""
    objects = [*VALID, *(_quarantined(obj) for obj in garbage)]
    shuffle.shuffle(objects)
    snapshot, _ = snapshot_from_objects(objects, "node-a")
    state = translate(snapshot, Settings())
    taken = {a for a, name in snapshot.nodes_by_address.items() if name == "garbage-node"}
    valid_part = {
        key: wanted
        for key, wanted in state.virtual_servers.items()
        if wanted.owner.service in VALID_SERVICES
    }
    assert valid_part == {
        key: wanted
        for key, wanted in BASELINE.virtual_servers.items()
        if key.address not in taken or wanted.kind in API_ALLOCATED
    }
    assert BASELINE.bound_addresses - taken <= state.bound_addresses
    assert BASELINE.node_addresses <= state.node_addresses
