from __future__ import annotations

import ipaddress
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ipvsproxy.cluster.parse import (
    SnapshotBuilder,
    node_parser,
    parse_endpoint_slice,
    parse_node,
    parse_service,
    snapshot_from_objects,
)
from ipvsproxy.model import (
    EndpointConditions,
    ObjectKey,
    ServiceType,
    TrafficPolicy,
    TransportProtocol,
)


def service(spec: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"kind": "Service", "metadata": {"name": "s", "namespace": "ns"}, "spec": spec, **extra}


def test_service_fields_are_read_from_camel_case() -> None:
    parsed, rejections = parse_service(
        service(
            {
                "type": "LoadBalancer",
                "clusterIPs": ["10.0.0.1", "fd00::1"],
                "ports": [{"name": "http", "port": 80, "nodePort": 30080, "targetPort": "web"}],
                "sessionAffinity": "ClientIP",
                "externalTrafficPolicy": "Local",
                "healthCheckNodePort": 32000,
            },
            status={"loadBalancer": {"ingress": [{"ip": "1.2.3.4", "ipMode": "Proxy"}]}},
        )
    )
    assert rejections == []
    assert parsed is not None
    assert parsed.key == ObjectKey("ns", "s")
    assert parsed.type is ServiceType.LOAD_BALANCER
    assert parsed.cluster_ips == ("10.0.0.1", "fd00::1")
    assert parsed.ports[0].protocol is TransportProtocol.TCP
    assert parsed.ports[0].node_port == 30080
    assert parsed.ports[0].target_port == "web"
    assert parsed.session_affinity_timeout == 10800
    assert parsed.external_traffic_policy is TrafficPolicy.LOCAL
    assert parsed.health_check_node_port == 32000
    assert parsed.load_balancer_ingress[0].ip_mode == "Proxy"


@pytest.mark.parametrize(
    ("port", "reason"),
    [
        ({"name": "a", "port": 0}, "outside 1-65535"),
        ({"name": "a", "port": 70000}, "outside 1-65535"),
        ({"name": "a", "port": 80, "protocol": "ICMP"}, "unknown protocol"),
        ({"name": "a", "port": 80, "nodePort": 99999}, "nodePort"),
        ({"name": "a", "port": "eighty"}, "not an integer"),
    ],
)
def test_bad_port_is_dropped_alone(port: dict[str, Any], reason: str) -> None:
    good = {"name": "ok", "port": 443}
    parsed, rejections = parse_service(service({"clusterIP": "10.0.0.1", "ports": [good, port]}))
    assert parsed is not None
    assert [p.name for p in parsed.ports] == ["ok"]
    assert len(rejections) == 1
    assert reason in rejections[0].reason


def test_duplicate_port_is_dropped() -> None:
    ports = [{"name": "a", "port": 80}, {"name": "b", "port": 80}, {"name": "a", "port": 81}]
    parsed, rejections = parse_service(service({"clusterIP": "10.0.0.1", "ports": ports}))
    assert parsed is not None
    assert [p.name for p in parsed.ports] == ["a"]
    assert len(rejections) == 2


def test_affinity_timeout_is_read() -> None:
    spec = {
        "sessionAffinity": "ClientIP",
        "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}},
    }
    parsed, _ = parse_service(service(spec))
    assert parsed is not None
    assert parsed.session_affinity_timeout == 60


def test_unknown_service_type_rejects_service() -> None:
    parsed, rejections = parse_service(service({"type": "Magic"}))
    assert parsed is None
    assert rejections[0].object == "Service ns/s"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({}, EndpointConditions(ready=True, serving=True, terminating=False)),
        ({"ready": False}, EndpointConditions(ready=False, serving=False, terminating=False)),
        (
            {"ready": False, "serving": True, "terminating": True},
            EndpointConditions(ready=False, serving=True, terminating=True),
        ),
    ],
)
def test_endpoint_conditions_defaults(raw: dict[str, Any], expected: EndpointConditions) -> None:
    parsed, _ = parse_endpoint_slice(
        {
            "kind": "EndpointSlice",
            "metadata": {
                "name": "e",
                "namespace": "ns",
                "labels": {"kubernetes.io/service-name": "s"},
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.1.0.1"], "conditions": raw}],
        }
    )
    assert parsed is not None
    assert parsed.endpoints[0].conditions == expected


def test_endpoint_without_addresses_is_dropped() -> None:
    parsed, rejections = parse_endpoint_slice(
        {
            "metadata": {
                "name": "e",
                "namespace": "ns",
                "labels": {"kubernetes.io/service-name": "s"},
            },
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": []},
                {
                    "addresses": ["10.1.0.1"],
                    "nodeName": "n1",
                    "hints": {"forZones": [{"name": "z1"}]},
                },
            ],
            "ports": [{"name": "", "port": 8080, "protocol": "UDP"}],
        }
    )
    assert parsed is not None
    assert parsed.service == ObjectKey("ns", "s")
    assert len(parsed.endpoints) == 1
    assert parsed.endpoints[0].hints_for_zones == ("z1",)
    assert parsed.ports[0].protocol is TransportProtocol.UDP
    assert "no addresses" in rejections[0].reason


@pytest.mark.parametrize(
    ("endpoint", "kept"),
    [
        ({"addresses": ["10.1.0.1", "10.1.0.2"], "zone": ""}, (("10.1.0.1", "10.1.0.2"), None)),
        ({"addresses": ["10.1.0.1"], "nodeName": "n1", "zone": "z1"}, (("10.1.0.1",), "z1")),
        ({"addresses": [1]}, None),
        ({"addresses": "10.1.0.1"}, None),
        ({"addresses": ["10.1.0.1"], "nodeName": 7}, None),
        ({"addresses": ["10.1.0.1"], "hints": []}, None),
    ],
    ids=["two-addresses", "named", "not-a-string", "not-a-list", "node-not-a-string", "hints-list"],
)
def test_an_endpoint_is_kept_whole_or_dropped_with_a_reason(
    endpoint: dict[str, object], kept: tuple[tuple[str, ...], str | None] | None
) -> None:
    parsed, rejections = parse_endpoint_slice({**_slice("IPv4"), "endpoints": [endpoint]})
    assert parsed is not None
    if kept is None:
        assert parsed.endpoints == ()
        assert rejections[0].reason.endswith("; endpoint dropped")
    else:
        assert [(e.addresses, e.zone) for e in parsed.endpoints] == [kept]
        assert rejections == []


def test_slice_without_service_label_is_rejected() -> None:
    parsed, rejections = parse_endpoint_slice({"metadata": {"name": "e"}})
    assert parsed is None
    assert rejections


def test_node_keeps_internal_and_external_addresses() -> None:
    parsed, _ = parse_node(
        {
            "metadata": {"name": "n1", "labels": {"topology.kubernetes.io/zone": "z1"}},
            "status": {
                "addresses": [
                    {"type": "InternalIP", "address": "192.168.1.1"},
                    {"type": "Hostname", "address": "n1"},
                ]
            },
        }
    )
    assert parsed is not None
    assert parsed.addresses == ("192.168.1.1",)
    assert parsed.zone == "z1"


def test_snapshot_picks_own_node_and_ignores_other_kinds() -> None:
    snapshot, rejections = snapshot_from_objects(
        [
            {"kind": "Node", "metadata": {"name": "a"}},
            {"kind": "Node", "metadata": {"name": "b"}},
            {"kind": "ConfigMap", "metadata": {"name": "c"}},
            service({"clusterIP": "10.0.0.1", "ports": [{"port": 80}]}),
        ],
        "b",
    )
    assert rejections == []
    assert snapshot.node is not None
    assert snapshot.node.name == "b"
    assert list(snapshot.services) == [ObjectKey("ns", "s")]


def big_node(name: str, *addresses: str) -> dict[str, Any]:
    """A Node as kubelets write them, with what a proxy never needs of another node."""
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": "z"}},
        "spec": {"podCIDRs": ["10.244.9.0/24"], "taints": [{"key": "k", "effect": "NoSchedule"}]},
        "status": {
            "addresses": [
                *({"type": "InternalIP", "address": a} for a in addresses),
                {"type": "Hostname", "address": name},
            ],
            "images": [{"names": [f"registry/image-{n}:v1"], "sizeBytes": n} for n in range(50)],
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def test_of_other_nodes_only_the_name_and_addresses_are_kept() -> None:
    parse = node_parser("node-a")
    own, _ = parse(big_node("node-a", "192.168.0.1"))
    other, problems = parse(big_node("node-b", "192.168.0.2", "fd00::2"))
    assert own is not None and own.zone == "z" and own.taints == ("k",)
    assert other is not None and problems == []
    assert (other.name, other.addresses) == ("node-b", ("192.168.0.2", "fd00::2"))
    assert (other.labels, other.pod_cidrs, other.taints) == ({}, (), ())


def test_the_snapshot_knows_every_nodes_addresses_by_address() -> None:
    snapshot, rejections = snapshot_from_objects(
        [
            big_node("node-b", "192.168.0.2", "192.168.0.9"),
            big_node("node-a", "192.168.0.1"),
            # Two nodes with one address: the first by name is named.
            big_node("node-c", "192.168.0.9", "bogus"),
        ],
        "node-a",
    )
    address = ipaddress.ip_address
    assert snapshot.nodes_by_address == {
        address("192.168.0.1"): "node-a",
        address("192.168.0.2"): "node-b",
        address("192.168.0.9"): "node-b",
    }
    assert [(r.object, r.reason) for r in rejections] == [
        ("Node node-c", "status.addresses[1] 'bogus' is not an IP address; ignored")
    ]


def test_a_node_list_that_starts_again_forgets_the_nodes_read_before() -> None:
    builder = SnapshotBuilder("node-a")
    builder.add(big_node("node-gone", "192.168.0.7"))
    builder.forget_nodes()
    builder.add(big_node("node-a", "192.168.0.1"))
    snapshot, _ = builder.build()
    assert list(snapshot.nodes_by_address.values()) == ["node-a"]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "kind",
                    "metadata",
                    "name",
                    "namespace",
                    "spec",
                    "ports",
                    "port",
                    "clusterIPs",
                    "endpoints",
                    "addresses",
                    "labels",
                    "status",
                    "type",
                    "protocol",
                    "conditions",
                ]
            ),
            children,
            max_size=4,
        )
    ),
    max_leaves=20,
)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    st.lists(
        st.dictionaries(
            st.sampled_from(["kind", "metadata", "spec", "status", "endpoints", "ports"]),
            json_values,
        )
    )
)
def test_garbage_never_raises(objects: list[dict[str, Any]]) -> None:
    for obj in objects:
        obj.setdefault("kind", "Service")
    snapshot_from_objects(objects, "n")
    for obj in objects:
        parse_service(obj)
        parse_endpoint_slice(obj)
        parse_node(obj)


def test_missing_own_node_is_reported_but_the_snapshot_stands() -> None:
    snapshot, rejections = snapshot_from_objects(
        [
            {"kind": "Node", "metadata": {"name": "other"}},
            service({"clusterIP": "10.0.0.1", "ports": [{"port": 80}]}),
        ],
        "me",
    )
    assert snapshot.node is None
    assert list(snapshot.services) == [ObjectKey("ns", "s")]
    assert [r.object for r in rejections] == ["Node me"]
    assert "--hostname-override" in rejections[0].reason


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-01-02T03:04:05Z", 1767323045.0),
        ("2026-01-02T03:04:05.5+00:00", 1767323045.5),
        ("yesterday", None),
        ("2026-01-02T03:04:05", None),
        (17, None),
    ],
)
def test_a_slices_trigger_time_is_read_and_a_bad_one_is_only_missing(
    value: Any, expected: float | None
) -> None:
    found, problems = parse_endpoint_slice(
        {
            "metadata": {
                "name": "web-1",
                "namespace": "shop",
                "labels": {"kubernetes.io/service-name": "web"},
                "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": value},
            },
            "addressType": "IPv4",
        }
    )
    assert found is not None and problems == []
    assert found.trigger_time == expected


def test_a_node_carries_its_taints_and_whether_it_is_being_deleted() -> None:
    node, problems = parse_node(
        {
            "metadata": {"name": "n", "deletionTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"taints": [{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}]},
        }
    )
    assert problems == []
    assert node is not None and node.deleting
    assert node.taints == ("ToBeDeletedByClusterAutoscaler",)


def _reasons(rejections: list[Any]) -> list[str]:
    return [r.reason for r in rejections]


@pytest.mark.parametrize(
    ("obj", "reason"),
    [
        ({"kind": "Service", "metadata": {"name": "s", "namespace": "ns"}}, "has no spec"),
        (service({"clusterIP": "10.0.0.1"}), "has no ports; nothing to program"),
        (
            service({"clusterIP": "", "ports": [{"port": 80}]}),
            "has no clusterIP (not allocated: never applied?); nothing to program",
        ),
    ],
)
def test_services_that_program_nothing_say_why(obj: dict[str, Any], reason: str) -> None:
    parsed, rejections = parse_service(obj)
    assert parsed is not None
    assert reason in " ".join(_reasons(rejections))


def test_headless_and_external_name_services_are_not_warned_about() -> None:
    assert parse_service(service({"clusterIP": "None"}))[1] == []
    assert parse_service(service({"type": "ExternalName", "externalName": "x.example"}))[1] == []


@pytest.mark.parametrize(
    "name",
    ["Upper", "has space", "new\nline", "-leading", "1starts-with-digit", "a" * 64, "a.b"],
)
def test_service_names_are_validated_as_kubernetes_does(name: str) -> None:
    obj = {"kind": "Service", "metadata": {"name": name, "namespace": "ns"}, "spec": {}}
    parsed, rejections = parse_service(obj)
    assert parsed is None
    assert _reasons(rejections) == [f"metadata.name {name!r} is not a valid Kubernetes name"]
    assert "\n" not in rejections[0].object


@pytest.mark.parametrize("namespace", ["NS", "a.b", "x\ny", ""])
def test_namespaces_are_validated(namespace: str) -> None:
    obj = {"kind": "Service", "metadata": {"name": "s", "namespace": namespace}}
    parsed, rejections = parse_service(obj)
    assert parsed is None
    assert _reasons(rejections) == [
        f"metadata.namespace {namespace!r} is not a valid Kubernetes name"
    ]


def test_port_names_that_could_forge_plan_lines_are_refused() -> None:
    parsed, rejections = parse_service(
        service(
            {
                "clusterIP": "10.0.0.1",
                "ports": [{"name": "x\n+ TCP 1.2.3.4:1", "port": 80}, {"name": "ok", "port": 81}],
            }
        )
    )
    assert parsed is not None
    assert [p.name for p in parsed.ports] == ["ok"]
    assert _reasons(rejections) == [
        "spec.ports[0].name 'x\\n+ TCP 1.2.3.4:1' is not a valid port name"
    ]


def _slice(address_type: str, *addresses: str) -> dict[str, Any]:
    return {
        "kind": "EndpointSlice",
        "metadata": {"name": "e", "namespace": "ns", "labels": {"kubernetes.io/service-name": "s"}},
        "addressType": address_type,
        "endpoints": [{"addresses": [a]} for a in addresses],
    }


def test_endpoint_addresses_that_do_not_parse_or_are_of_the_wrong_family_are_named() -> None:
    parsed, rejections = parse_endpoint_slice(_slice("IPv4", "10.0.0.1", "bogus", "fd00::1"))
    assert parsed is not None
    assert [e.addresses for e in parsed.endpoints] == [("10.0.0.1",)]
    assert _reasons(rejections) == [
        "endpoints[1] address 'bogus' is not an IP address; endpoint dropped",
        "endpoints[2] address 'fd00::1' is not IPv4, the slice's addressType; endpoint dropped",
    ]
    assert [r.object for r in rejections] == ["EndpointSlice ns/e"] * 2


@pytest.mark.parametrize(
    ("address_type", "texts", "expected"),
    [
        ("IPv4", ("10.0.0.7", "10.0.0.8"), ipaddress.IPv4Address("10.0.0.7")),
        ("IPv6", ("fd00::7",), ipaddress.IPv6Address("fd00::7")),
        ("FQDN", ("backend.example",), None),
    ],
)
def test_an_endpoint_carries_its_first_address_parsed(
    address_type: str,
    texts: tuple[str, ...],
    expected: ipaddress.IPv4Address | ipaddress.IPv6Address | None,
) -> None:
    raw = _slice(address_type)
    raw["endpoints"] = [{"addresses": list(texts)}]
    parsed, rejections = parse_endpoint_slice(raw)
    assert parsed is not None and not rejections
    (endpoint,) = parsed.endpoints
    assert endpoint.first_address == expected
    assert endpoint.addresses == texts


def test_node_addresses_and_pod_cidrs_that_do_not_parse_are_warned_about() -> None:
    parsed, rejections = parse_node(
        {
            "kind": "Node",
            "metadata": {"name": "n"},
            "spec": {"podCIDRs": ["10.244.0.0/24", "10.244.0.0/33"]},
            "status": {
                "addresses": [
                    {"type": "InternalIP", "address": "192.168.0.1"},
                    {"type": "InternalIP", "address": "192.168.0.300"},
                ]
            },
        }
    )
    assert parsed is not None
    assert parsed.addresses == ("192.168.0.1",)
    assert parsed.pod_cidrs == ("10.244.0.0/24",)
    assert _reasons(rejections) == [
        "spec.podCIDRs '10.244.0.0/33' is not a CIDR; ignored",
        "status.addresses[1] '192.168.0.300' is not an IP address; ignored",
    ]


def test_creation_timestamp_is_read_and_a_bad_one_is_named() -> None:
    good = service({"clusterIP": "10.0.0.1", "ports": [{"port": 80}]})
    good["metadata"]["creationTimestamp"] = "2024-01-01T00:00:00Z"
    parsed, rejections = parse_service(good)
    assert parsed is not None and parsed.created == "2024-01-01T00:00:00Z"
    assert rejections == []
    good["metadata"]["creationTimestamp"] = "yesterday"
    parsed, rejections = parse_service(good)
    assert parsed is not None and parsed.created == ""
    assert "not an RFC 3339 UTC time" in _reasons(rejections)[0]


SPEC = {"clusterIP": "10.96.0.1", "ports": [{"port": 80}]}


def test_a_service_keeps_only_the_labels_and_annotations_the_proxy_reads() -> None:
    metadata = {
        "name": "s",
        "namespace": "ns",
        "labels": {"app": "web", "service.kubernetes.io/service-proxy-name": "ours"},
        "annotations": {
            "ipvsproxy.io/scheduler": "wrr",
            "kubectl.kubernetes.io/last-applied-configuration": '{"a": "long document"}',
        },
    }
    parsed, rejections = parse_service({**service(SPEC), "metadata": metadata})

    assert parsed is not None and rejections == []
    assert dict(parsed.labels) == {"service.kubernetes.io/service-proxy-name": "ours"}
    assert dict(parsed.annotations) == {"ipvsproxy.io/scheduler": "wrr"}
    # Entries not kept are still checked: a broken one rejects the service as before.
    metadata["labels"] = {"app": 1}
    broken, problems = parse_service({**service(SPEC), "metadata": metadata})
    assert broken is None and [r.reason for r in problems] == [
        "metadata.labels has non-string entries"
    ]


def test_names_repeated_across_objects_are_one_string() -> None:
    def decoded_slice(name: str) -> dict[str, Any]:
        # As from separate API answers: every string a copy of its own.
        decoded: dict[str, Any] = json.loads(
            json.dumps(
                {
                    "kind": "EndpointSlice",
                    "metadata": {
                        "name": name,
                        "namespace": "shop",
                        "labels": {"kubernetes.io/service-name": "web"},
                    },
                    "addressType": "IPv4",
                    "endpoints": [
                        {"addresses": ["10.244.0.9"], "nodeName": "node-7", "zone": "zone-b"}
                    ],
                    "ports": [{"name": "http", "port": 8080}],
                }
            )
        )
        return decoded

    first, _ = parse_endpoint_slice(decoded_slice("web-1"))
    second, _ = parse_endpoint_slice(decoded_slice("web-2"))

    assert first is not None and second is not None
    assert first.key.namespace is second.key.namespace
    assert first.address_type is second.address_type
    assert first.ports[0].name is second.ports[0].name
    assert first.endpoints[0].node_name is second.endpoints[0].node_name
    assert first.endpoints[0].zone is second.endpoints[0].zone


@pytest.mark.parametrize("port", [-1, 65536])
def test_a_health_check_node_port_outside_the_port_range_is_ignored_and_named(port: int) -> None:
    parsed, rejections = parse_service(
        service({**SPEC, "type": "LoadBalancer", "healthCheckNodePort": port})
    )

    assert parsed is not None and parsed.health_check_node_port is None
    assert [r.reason for r in rejections] == [
        f"spec.healthCheckNodePort {port} is outside 1-65535; ignored"
    ]
