"""Services and EndpointSlices for the scenarios, built so that the two nodes mirror each other.

Endpoints come in twins: pod ``n`` of node-a and pod ``n`` of node-b, alike in everything but
their node, so whatever one proxy sees as local the other sees in its twin. Endpoints on
node-c are remote to both.
"""

from __future__ import annotations

from typing import Any

from tests.differential.topology import NODE_A, NODE_B, NODE_C, POD_PORT, NodeLayout

JsonObject = dict[str, Any]
SERVICE_NAME_LABEL = "kubernetes.io/service-name"


def port(
    number: int,
    protocol: str = "TCP",
    *,
    name: str = "",
    target: int | str = POD_PORT,
    node_port: int | None = None,
) -> JsonObject:
    spec: JsonObject = {"name": name, "port": number, "protocol": protocol, "targetPort": target}
    if node_port is not None:
        spec["nodePort"] = node_port
    return spec


def service(
    namespace: str,
    name: str,
    ports: list[JsonObject],
    *,
    kind: str = "ClusterIP",
    families: tuple[str, ...] = ("IPv4",),
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    ingress: tuple[str, ...] = (),
    ingress_mode: str | None = None,
    **spec: Any,
) -> JsonObject:
    """A Service; the API server allocates its cluster IPs (and node ports) unless given."""
    metadata: JsonObject = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = labels
    if annotations:
        metadata["annotations"] = annotations
    addressing: JsonObject = {
        "ipFamilies": list(families),
        "ipFamilyPolicy": "RequireDualStack" if len(families) > 1 else "SingleStack",
    }
    body: JsonObject = {
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "type": kind,
            "ports": ports,
            **(addressing if kind != "ExternalName" else {}),
            **spec,
        },
    }
    if ingress:
        extra = {"ipMode": ingress_mode} if ingress_mode else {}
        body["status"] = {"loadBalancer": {"ingress": [{"ip": ip, **extra} for ip in ingress]}}
    return body


def endpoint(
    node: NodeLayout,
    number: int,
    family: str = "IPv4",
    *,
    ready: bool = True,
    serving: bool | None = None,
    terminating: bool = False,
    zone: str | None = "zone-1",
    for_nodes: tuple[str, ...] | None = None,
    for_zones: tuple[str, ...] | None = None,
) -> JsonObject:
    address = node.pod_ipv4(number) if family == "IPv4" else node.pod_ipv6(number)
    found: JsonObject = {
        "addresses": [address],
        "conditions": {
            "ready": ready,
            "serving": ready if serving is None else serving,
            "terminating": terminating,
        },
        "nodeName": node.name,
    }
    if zone is not None:
        found["zone"] = zone
    hints: JsonObject = {}
    if for_nodes is not None:
        hints["forNodes"] = [{"name": name} for name in for_nodes]
    if for_zones is not None:
        hints["forZones"] = [{"name": name} for name in for_zones]
    if hints:
        found["hints"] = hints
    return found


def twins(*numbers: int, family: str = "IPv4", **conditions: Any) -> list[JsonObject]:
    """Pod ``n`` of node-a and of node-b for each ``n``, alike."""
    return [
        endpoint(node, number, family, **conditions)
        for number in numbers
        for node in (NODE_A, NODE_B)
    ]


def mirrored_node_hints(*numbers: int, family: str = "IPv4") -> list[JsonObject]:
    """Twins each hinted for its own node (kube-proxy's PreferSameNode)."""
    return [
        endpoint(node, number, family, for_nodes=(node.name,))
        for number in numbers
        for node in (NODE_A, NODE_B)
    ]


def remote(*numbers: int, family: str = "IPv4", **conditions: Any) -> list[JsonObject]:
    """Endpoints on node-c, local to neither proxy."""
    return [endpoint(NODE_C, number, family, **conditions) for number in numbers]


def endpoint_slice(
    namespace: str,
    service_name: str,
    endpoints: list[JsonObject],
    ports: list[JsonObject],
    *,
    family: str = "IPv4",
    name: str | None = None,
) -> JsonObject:
    return {
        "kind": "EndpointSlice",
        "metadata": {
            "name": name or f"{service_name}-{family.lower()}",
            "namespace": namespace,
            "labels": {SERVICE_NAME_LABEL: service_name},
        },
        "addressType": family,
        "endpoints": endpoints,
        "ports": ports,
    }


def slice_port(number: int = POD_PORT, protocol: str = "TCP", name: str = "") -> JsonObject:
    return {"name": name, "port": number, "protocol": protocol}
