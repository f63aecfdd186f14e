from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ipvsproxy.cluster.parse import parse_endpoint_slice, parse_service, snapshot_from_objects
from ipvsproxy.kernel.ipset.entries import parse_entry
from ipvsproxy.model import EndpointSlice, ObjectKey, Service
from ipvsproxy.translate import ServiceCache, Settings, translate
from tests.unit.test_translate_rules import NODE

texts = st.sampled_from(["", "None", "10.96.0.1", "fd00::1", "1.2.3.999", "x", "node-a", "p"])
ints = st.sampled_from([0, 1, 53, 80, 8080, 30001, 65535, 65536, -1])
endpoint = st.fixed_dictionaries(
    {"addresses": st.lists(texts, max_size=2)},
    optional={
        "nodeName": texts,
        "conditions": st.dictionaries(
            st.sampled_from(["ready", "serving", "terminating"]), st.booleans()
        ),
    },
)
port = st.fixed_dictionaries(
    {"name": texts, "port": ints},
    optional={"protocol": st.sampled_from(["TCP", "UDP", "SCTP", "ICMP"]), "nodePort": ints},
)
service = st.builds(
    lambda name, spec, ingress: {
        "kind": "Service",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": spec,
        "status": {"loadBalancer": {"ingress": [{"ip": ip} for ip in ingress]}},
    },
    st.sampled_from(["s", "t", "u"]),
    st.fixed_dictionaries(
        {"clusterIPs": st.lists(texts, max_size=2), "ports": st.lists(port, max_size=3)},
        optional={
            "type": st.sampled_from(["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"]),
            "externalIPs": st.lists(texts, max_size=2),
            "externalTrafficPolicy": st.sampled_from(["Local", "Cluster"]),
            "internalTrafficPolicy": st.sampled_from(["Local", "Cluster"]),
            "sessionAffinity": st.sampled_from(["ClientIP", "None"]),
            "loadBalancerSourceRanges": st.lists(
                st.sampled_from(["192.168.0.0/16", "10.0.0.1/32", "fd00::/8", "x"]), max_size=2
            ),
            "healthCheckNodePort": ints,
        },
    ),
    st.lists(st.sampled_from(["203.0.113.1", "2001:db8::1", "192.168.0.1"]), max_size=2),
)
endpoint_slice = st.builds(
    lambda name, service_name, address_type, endpoints, ports: {
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "labels": {"kubernetes.io/service-name": service_name},
        },
        "addressType": address_type,
        "endpoints": endpoints,
        "ports": ports,
    },
    st.sampled_from(["e1", "e2", "e3"]),
    st.sampled_from(["s", "t", "u"]),
    st.sampled_from(["IPv4", "IPv6", "FQDN"]),
    st.lists(endpoint, max_size=3),
    st.lists(port, max_size=2),
)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(service | endpoint_slice, max_size=8))
def test_generated_clusters_translate_without_raising(objects: list[dict[str, Any]]) -> None:
    snapshot, _ = snapshot_from_objects([NODE, *objects], "node-a")
    state = translate(snapshot, Settings())
    assert state == translate(snapshot, Settings())
    addresses = state.bound_addresses | state.node_addresses
    owners = {
        key
        for key, svc in snapshot.services.items()
        if svc.type.value != "ExternalName" and svc.cluster_ips[:1] not in ((), ("None",))
    }
    for key, desired in state.virtual_servers.items():
        assert key.address in addresses
        assert desired.owner.service in owners


BUILT_IN_TARGETS = {"ACCEPT", "DROP", "RETURN", "REJECT", "MASQUERADE", "MARK"}


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(service | endpoint_slice, max_size=8))
def test_ipset_entries_are_as_the_kernel_lists_them_and_every_jump_has_its_chain(
    objects: list[dict[str, Any]],
) -> None:
    snapshot, _ = snapshot_from_objects([NODE, *objects], "node-a")
    state = translate(snapshot, Settings())
    for name, content in state.ipsets.items():
        assert len(name) <= 31
        spec = content.spec
        for entry in content.entries:
            # reconcile compares these texts with the kernel's listing as they are.
            listed = str(parse_entry(entry, spec.set_type, spec.family))
            assert listed == entry, (name, entry)
    for ruleset in state.iptables:
        for table, chains in ruleset.chains.items():
            for rule in (rule for rules in chains.values() for rule in rules):
                target = rule[rule.index("-j") + 1]
                assert target in BUILT_IN_TARGETS or target in chains, (table, rule)
                sets = [rule[i + 1] for i, arg in enumerate(rule) if arg == "--match-set"]
                assert all(state.ipsets[s].spec.family is ruleset.family for s in sets)
        for jump in ruleset.jumps:
            assert jump.target in ruleset.chains[jump.table]


# Other nodes' addresses as they come and go: some are the services' addresses above.
other_nodes = st.lists(st.sampled_from(["10.96.0.1", "fd00::1", "203.0.113.1", "2001:db8::1"]))


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.lists(service | endpoint_slice, max_size=4), other_nodes),
        min_size=1,
        max_size=5,
    )
)
def test_a_translation_cache_changes_nothing_but_the_work(
    steps: list[tuple[list[dict[str, Any]], list[str]]],
) -> None:
    """Objects that did not change stay the same objects, as the informer keeps them."""
    cache = ServiceCache()
    services: dict[ObjectKey, Service] = {}
    slices: dict[ObjectKey, EndpointSlice] = {}
    for changes, addresses in steps:
        other = {
            "kind": "Node",
            "metadata": {"name": "node-b"},
            "status": {"addresses": [{"type": "InternalIP", "address": a} for a in addresses]},
        }
        node, _ = snapshot_from_objects([NODE, other], "node-a")
        for obj in changes:
            if obj["kind"] == "Service":
                parsed_service = parse_service(obj)[0]
                if parsed_service is not None:
                    services[parsed_service.key] = parsed_service
            else:
                parsed_slice = parse_endpoint_slice(obj)[0]
                if parsed_slice is not None:
                    slices[parsed_slice.key] = parsed_slice
        snapshot = replace(node, services=dict(services), endpoint_slices=dict(slices))
        assert translate(snapshot, Settings(), cache) == translate(snapshot, Settings())
