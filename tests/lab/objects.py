"""Kubernetes objects as the API sends them (camelCase JSON), built in one line each.

Only the fields a proxy reads; anything else a test needs goes in through ``**spec``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

JsonObject = dict[str, Any]
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
TRIGGER_TIME_ANNOTATION = "endpoints.kubernetes.io/last-change-trigger-time"


def port(
    number: int,
    protocol: str = "TCP",
    *,
    target: int | str = 8080,
    node_port: int | None = None,
    name: str = "",
) -> JsonObject:
    """A Service port."""
    spec: JsonObject = {"name": name, "port": number, "protocol": protocol, "targetPort": target}
    if node_port is not None:
        spec["nodePort"] = node_port
    return spec


def service(
    name: str,
    cluster_ips: list[str],
    ports: list[JsonObject],
    *,
    namespace: str = "default",
    service_type: str = "ClusterIP",
    ingress_ips: tuple[str, ...] = (),
    families: tuple[str, ...] = ("IPv4",),
    **spec: Any,
) -> JsonObject:
    """A Service; its ipFamilies follow ``cluster_ips``, extra spec fields in camelCase.

    Without ``cluster_ips`` the API server allocates them, one of each of ``families``, as it
    allocates node ports not given (see ``cluster_ip`` and ``node_port``)."""
    if cluster_ips:
        families = tuple("IPv6" if ":" in ip else "IPv4" for ip in cluster_ips)
    addressing: JsonObject = {
        "ipFamilies": list(families),
        "ipFamilyPolicy": "RequireDualStack" if len(families) > 1 else "SingleStack",
    }
    if cluster_ips:
        addressing |= {"clusterIP": cluster_ips[0], "clusterIPs": cluster_ips}
    obj: JsonObject = {
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "type": service_type,
            **addressing,
            "ports": ports,
            "sessionAffinity": "None",
            **spec,
        },
    }
    if ingress_ips:
        obj["status"] = {"loadBalancer": {"ingress": [{"ip": ip} for ip in ingress_ips]}}
    return obj


def cluster_ip(stored: JsonObject, family: str = "IPv4") -> str:
    """A stored Service's cluster IP of ``family``."""
    ips: list[str] = stored["spec"]["clusterIPs"]
    return next(ip for ip in ips if (":" in ip) == (family == "IPv6"))


def node_port(stored: JsonObject, index: int = 0) -> int:
    """The node port of a stored Service's ``index``-th port."""
    number: int = stored["spec"]["ports"][index]["nodePort"]
    return number


def endpoint(
    address: str,
    node: str = "node-a",
    *,
    ready: bool = True,
    serving: bool | None = None,
    terminating: bool = False,
) -> JsonObject:
    conditions = {
        "ready": ready,
        "serving": ready if serving is None else serving,
        "terminating": terminating,
    }
    return {"addresses": [address], "conditions": conditions, "nodeName": node}


def slice_port(number: int = 8080, protocol: str = "TCP", name: str = "") -> JsonObject:
    return {"name": name, "port": number, "protocol": protocol}


def endpoint_slice(
    service_name: str,
    endpoints: list[JsonObject],
    ports: list[JsonObject],
    *,
    namespace: str = "default",
    name: str | None = None,
    address_type: str = "IPv4",
    changed_at: datetime | None = None,
) -> JsonObject:
    """An EndpointSlice of ``service_name``; ``changed_at`` sets the trigger-time annotation
    from which kube-proxy measures network programming latency."""
    metadata: JsonObject = {
        "name": name or f"{service_name}-{address_type.lower()}",
        "namespace": namespace,
        "labels": {SERVICE_NAME_LABEL: service_name},
    }
    if changed_at is not None:
        stamp = changed_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        metadata["annotations"] = {TRIGGER_TIME_ANNOTATION: stamp}
    return {
        "kind": "EndpointSlice",
        "metadata": metadata,
        "addressType": address_type,
        "endpoints": endpoints,
        "ports": ports,
    }


def node(name: str, *addresses: str) -> JsonObject:
    internal = [{"type": "InternalIP", "address": address} for address in addresses]
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"addresses": [*internal, {"type": "Hostname", "address": name}]},
    }


def pod(
    name: str,
    labels: dict[str, str],
    *addresses: str,
    node: str = "node-a",
    namespace: str = "default",
    ready: bool = True,
) -> JsonObject:
    """A Pod bound to ``node`` and running there at ``addresses``, as its kubelet would report
    it: nothing schedules or runs it in the lab, the test writes its status."""
    condition = "True" if ready else "False"
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "app", "image": "registry.invalid/app"}],
        },
        "status": {
            "phase": "Running",
            "podIP": addresses[0],
            "podIPs": [{"ip": address} for address in addresses],
            "conditions": [{"type": "Ready", "status": condition}],
        },
    }
