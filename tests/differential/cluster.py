"""Writes to the real API server: server-side apply (create or update in one request), status,
deletes; and the marker objects by which a batch of writes is known to have been synced.

A marker is a dual-stack Service with one endpoint per family, written after a batch. Each
watch delivers its events in order, so once a proxy's kernel holds the marker's virtual
servers with their real servers, its sync has seen every Service and EndpointSlice written
before it, in both of kube-proxy's per-family proxiers.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from dataclasses import dataclass
from typing import Any

from tests.controlplane.cluster import ApiError, ControlPlane

JsonObject = dict[str, Any]
APPLY = "application/apply-patch+yaml"
FIELD_MANAGER = "differential"
MARKER_NAMESPACE = "diff-marker"
MARKER_ENDPOINT_IPV4 = "10.244.3.250"
MARKER_ENDPOINT_IPV6 = "fd00:10:244:3::fa"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"


@dataclass(frozen=True)
class Ref:
    kind: str
    namespace: str
    name: str


def ref(obj: JsonObject) -> Ref:
    meta = obj["metadata"]
    return Ref(obj["kind"], meta.get("namespace", ""), meta["name"])


def _path(what: Ref) -> str:
    name = urllib.parse.quote(what.name)
    if what.kind == "Namespace":
        return f"/api/v1/namespaces/{name}"
    if what.kind == "Node":
        return f"/api/v1/nodes/{name}"
    namespace = urllib.parse.quote(what.namespace)
    if what.kind == "Service":
        return f"/api/v1/namespaces/{namespace}/services/{name}"
    if what.kind == "EndpointSlice":
        return f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices/{name}"
    raise ValueError(f"no path for {what.kind}")


_API_VERSIONS = {"EndpointSlice": "discovery.k8s.io/v1"}


class Owners:
    """Which Service each address and node port belongs to, as the API server last showed
    them: a difference names the services it concerns, and its explanation may read them."""

    def __init__(self) -> None:
        self.services: dict[str, JsonObject] = {}
        # name -> (its addresses, its service ports, its node ports)
        self._claims: dict[str, tuple[frozenset[str], frozenset[int], frozenset[int]]] = {}

    def record(self, service: JsonObject) -> None:
        spec, status = service.get("spec", {}), service.get("status", {})
        addresses = [*spec.get("clusterIPs", []), *spec.get("externalIPs", [])]
        addresses += [
            i["ip"] for i in status.get("loadBalancer", {}).get("ingress", []) if "ip" in i
        ]
        node_ports = [p["nodePort"] for p in spec.get("ports", []) if p.get("nodePort")]
        if spec.get("healthCheckNodePort"):
            node_ports.append(spec["healthCheckNodePort"])
        meta = service["metadata"]
        name = f"{meta['namespace']}/{meta['name']}"
        self.services[name] = service
        self._claims[name] = (
            frozenset(str(ipaddress.ip_address(a)) for a in addresses if a != "None"),
            frozenset(p["port"] for p in spec.get("ports", [])),
            frozenset(node_ports),
        )

    def forget(self, what: Ref) -> None:
        self.services.pop(f"{what.namespace}/{what.name}", None)
        self._claims.pop(f"{what.namespace}/{what.name}", None)

    def of(self, text: str) -> tuple[str, ...]:
        """The services of each ``ADDRESS:PORT`` in ``text``: one of its addresses with one of
        its ports, or any address with one of its node ports."""
        found = set()
        for match in _ENDPOINT_TEXT.finditer(text):
            address, number = match.group(1).strip("[]"), int(match.group(2))
            for name, (addresses, ports, node_ports) in self._claims.items():
                if (address in addresses and number in ports) or number in node_ports:
                    found.add(name)
        return tuple(sorted(found))


# "10.96.0.1:80", "[fd00::1]:80", "10.96.0.1,tcp:80": an address and a port.
_ENDPOINT_TEXT = re.compile(r"(\[[0-9a-f:]+\]|[0-9a-f:.]*[0-9a-f])(?::|,(?:tcp|udp|sctp):)(\d+)")


class Cluster:
    def __init__(self, control_plane: ControlPlane) -> None:
        self.api = control_plane
        self._namespaces: set[str] = set()
        self.owners = Owners()
        self.markers = 0

    def apply(self, obj: JsonObject) -> JsonObject:
        """Create or update ``obj`` (its status too, when it carries one)."""
        what = ref(obj)
        if what.namespace and what.namespace not in self._namespaces:
            self.apply({"kind": "Namespace", "metadata": {"name": what.namespace}})
            self._namespaces.add(what.namespace)
        body = {"apiVersion": _API_VERSIONS.get(what.kind, "v1"), **obj}
        if what.kind == "Node":
            return self._replace(what, body)
        status = body.pop("status", None)
        query = f"?fieldManager={FIELD_MANAGER}&force=true"
        applied = self.api.request("PATCH", _path(what) + query, body, content_type=APPLY)
        if status is not None:
            body = {**body, "status": status}
            applied = self.api.request(
                "PATCH", _path(what) + "/status" + query, body, content_type=APPLY
            )
        if what.kind == "Service":
            self.owners.record(applied)
        return applied

    def _replace(self, what: Ref, body: JsonObject) -> JsonObject:
        """Create, or replace whole, spec and status. (Server-side apply refuses a Node with
        an InternalIP of each family: its addresses merge by type.)"""
        current = self.get(what)
        if current is None:
            collection = _path(what).rsplit("/", 1)[0]
            current = self.api.request("POST", collection, body)
        versioned = {**body, "metadata": {**body["metadata"], "resourceVersion": ""}}
        for suffix in ("", "/status"):
            latest = self.api.request("GET", _path(what))
            versioned["metadata"]["resourceVersion"] = latest["metadata"]["resourceVersion"]
            current = self.api.request("PUT", _path(what) + suffix, versioned)
        return current

    def delete(self, what: Ref) -> bool:
        """Delete the object; whether there was one."""
        if what.kind == "Service":
            self.owners.forget(what)
        try:
            self.api.request("DELETE", _path(what))
        except ApiError as error:
            if error.status != 404:
                raise
            return False
        return True

    def get(self, what: Ref) -> JsonObject | None:
        try:
            return self.api.request("GET", _path(what))
        except ApiError as error:
            if error.status == 404:
                return None
            raise


@dataclass(frozen=True)
class Marker:
    """What the kernel of a proxy that synced the marker holds: a TCP virtual server on
    ``port`` at each cluster IP, each with one real server on ``port``."""

    port: int
    cluster_ips: tuple[str, ...]


def write_marker(cluster: Cluster) -> Marker:
    """The next marker: its port changes each time, so no proxy can hold it before it syncs."""
    cluster.markers += 1
    port = 1000 + cluster.markers % 30000
    service = cluster.apply(
        {
            "kind": "Service",
            "metadata": {"name": "marker", "namespace": MARKER_NAMESPACE},
            "spec": {
                "ipFamilyPolicy": "RequireDualStack",
                "ipFamilies": ["IPv4", "IPv6"],
                "ports": [{"name": "m", "port": port, "protocol": "TCP"}],
            },
        }
    )
    for family, address in (("IPv4", MARKER_ENDPOINT_IPV4), ("IPv6", MARKER_ENDPOINT_IPV6)):
        cluster.apply(
            {
                "kind": "EndpointSlice",
                "metadata": {
                    "name": f"marker-{family.lower()}",
                    "namespace": MARKER_NAMESPACE,
                    "labels": {SERVICE_NAME_LABEL: "marker"},
                },
                "addressType": family,
                "endpoints": [
                    {"addresses": [address], "conditions": {"ready": True}, "nodeName": "node-c"}
                ],
                "ports": [{"name": "m", "port": port, "protocol": "TCP"}],
            }
        )
    return Marker(port, tuple(service["spec"]["clusterIPs"]))
