from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ipvsproxy.cluster.parse import snapshot_from_objects
from ipvsproxy.translate import Settings, translate
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
    lambda name, spec: {
        "kind": "Service",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": spec,
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
        },
    ),
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
