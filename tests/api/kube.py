"""The api tier's real API server: one control plane for the session, a namespace per test.

The control plane (``tests/controlplane``: etcd and kube-apiserver v1.37.2 on loopback, real
TLS, a static admin token, ``--authorization-mode=Node,RBAC``) starts once per session, with
etcd's data in a tmpfs folder. It runs with two settings of its own, both real and supported:

* ``--watch-cache-sizes=services#0``. A real API server serves watches from its watch cache,
  which an etcd compaction does not touch: a watch from a compacted version of a cached
  resource goes on as if nothing happened, so no test could force a ``410 Gone`` there. Without
  a cache for Services alone, their watches (and paginated lists) read etcd's history, and
  ``ControlPlane.compact()`` makes the next watch from an older version, or the next page of
  an older list, fail with 410, as it does wherever a client falls behind the history. The
  EndpointSlice and Node watches keep the cache, and with it the watch bookmarks, which only
  the cache sends (a watch on etcd directly never gets one). One server shows both.
* ``--etcd-compaction-interval=0``: the API server never compacts on its own (every 5 minutes
  by default), so only a test's own compaction makes a 410, and no test gets one by chance.

Tests share the server, so each writes its namespaced objects into a namespace of its own
and names its Nodes and other cluster-wide objects after that namespace; ``cleanup`` deletes
what the test made, so the next test's informer lists only its own objects (and the
``kubernetes`` Service the API server keeps in ``default``). Objects are written with
server-side apply, so a test states an object whole and the server merges it; Services are
written without a cluster IP or node ports, so the API server allocates them, as in a real
cluster (``unallocated``).
"""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from tests.controlplane.cluster import ApiError, ControlPlane

JsonObject = dict[str, Any]

SESSION_APISERVER_ARGS = ("--watch-cache-sizes=services#0", "--etcd-compaction-interval=0")
FIELD_MANAGER = "ipvsproxy-tests"
RBAC_GROUP = "rbac.authorization.k8s.io"


@dataclass(frozen=True, slots=True)
class Kind:
    api_version: str
    plural: str
    namespaced: bool = True

    @property
    def prefix(self) -> str:
        # The core group lives under /api, every other group under /apis.
        return f"/apis/{self.api_version}" if "/" in self.api_version else "/api/v1"


KINDS = {
    "Service": Kind("v1", "services"),
    "EndpointSlice": Kind("discovery.k8s.io/v1", "endpointslices"),
    "Node": Kind("v1", "nodes", namespaced=False),
    "Namespace": Kind("v1", "namespaces", namespaced=False),
    "ServiceAccount": Kind("v1", "serviceaccounts"),
    "Pod": Kind("v1", "pods"),
    "Secret": Kind("v1", "secrets"),
    "Event": Kind("v1", "events"),
    "ClusterRole": Kind(f"{RBAC_GROUP}/v1", "clusterroles", namespaced=False),
    "ClusterRoleBinding": Kind(f"{RBAC_GROUP}/v1", "clusterrolebindings", namespaced=False),
}
# What a test's namespace holds that a later test's informer would list.
LISTED_KINDS = ("Service", "EndpointSlice")


def path(kind: str, namespace: str = "", name: str = "", subresource: str = "") -> str:
    """The API path of a collection (no name) or of one object."""
    spec = KINDS[kind]
    parts = [spec.prefix]
    if spec.namespaced and namespace:
        parts.append(f"namespaces/{namespace}")
    parts.append(spec.plural)
    parts.extend(part for part in (name, subresource) if part)
    return "/".join(parts)


def unallocated(obj: JsonObject) -> JsonObject:
    """A Service as a user writes it: no cluster IP (unless headless) and no node ports, which
    the API server allocates; no resourceVersion. Other kinds come back as they were."""
    result = copy.deepcopy(obj)
    result.get("metadata", {}).pop("resourceVersion", None)
    if result.get("kind") != "Service":
        return result
    spec = result.setdefault("spec", {})
    if spec.get("clusterIP") != "None":
        spec.pop("clusterIP", None)
        spec.pop("clusterIPs", None)
    spec.pop("healthCheckNodePort", None)
    for port in spec.get("ports") or []:
        port.pop("nodePort", None)
    return result


def reading(group: str, *resources: str) -> JsonObject:
    """An RBAC rule: get, list and watch ``resources`` of API ``group``."""
    return {"apiGroups": [group], "resources": list(resources), "verbs": ["get", "list", "watch"]}


def cluster_ip(obj: JsonObject) -> str:
    ip: str = obj["spec"]["clusterIP"]
    return ip


_COUNTER = itertools.count(1)


def namespace_for(test_name: str) -> str:
    """A namespace name unique in the session, telling which test made it."""
    slug = re.sub(r"[^a-z0-9]+", "-", test_name.lower()).strip("-")
    return f"t{next(_COUNTER)}-{slug}"[:63].rstrip("-")


@dataclass
class Kube:
    """One test's view of the shared API server: its namespace, its node names, and writes
    as the admin (the proxy under test reads through its own connection)."""

    control_plane: ControlPlane
    namespace: str
    # Where this test's files go (kubeconfigs with other tokens).
    folder: Path
    # Cluster-wide objects this test wrote, deleted by ``cleanup``.
    _cluster_wide: dict[tuple[str, str], None] = field(default_factory=dict)

    @property
    def kubeconfig(self) -> Path:
        return self.control_plane.kubeconfig

    def node_name(self, name: str = "node-a") -> str:
        """This test's name for a Node (Nodes are cluster-wide: names must not collide)."""
        return f"{self.namespace}.{name}"

    def create_namespace(self) -> None:
        self.apply({"kind": "Namespace", "metadata": {"name": self.namespace}})

    def localized(self, obj: JsonObject) -> JsonObject:
        """``obj`` moved into this test: its namespace, its node names, nothing allocated."""
        result = unallocated(obj)
        metadata = result.setdefault("metadata", {})
        kind = result["kind"]
        if kind == "Node":
            metadata["name"] = self.node_name(metadata["name"])
        elif KINDS[kind].namespaced:
            metadata["namespace"] = self.namespace
        for endpoint in result.get("endpoints") or []:
            if endpoint.get("nodeName"):
                endpoint["nodeName"] = self.node_name(endpoint["nodeName"])
        return result

    def add(self, obj: JsonObject) -> JsonObject:
        """``obj`` moved into this test (``localized``) and applied, its status too (the API
        server drops a new Service's status); the object as the server stored it."""
        local = self.localized(obj)
        stored = self.apply(local)
        if local["kind"] == "Service" and local.get("status"):
            stored = self.apply_status(local)
        return stored

    def add_all(self, objects: Iterable[JsonObject]) -> list[JsonObject]:
        return [self.add(obj) for obj in objects]

    def apply(self, obj: JsonObject) -> JsonObject:
        """Create or update ``obj`` (server-side apply); the object as the server stored it.

        A namespaced object without a namespace goes into this test's."""
        kind = obj["kind"]
        spec = KINDS[kind]
        body = copy.deepcopy(obj)
        body["apiVersion"] = spec.api_version
        metadata = body.setdefault("metadata", {})
        namespace = metadata.setdefault("namespace", self.namespace) if spec.namespaced else ""
        if not spec.namespaced:
            metadata.pop("namespace", None)
            self._cluster_wide[kind, metadata["name"]] = None
        return self._request(
            "PATCH",
            path(kind, namespace, metadata["name"]),
            body,
            query={"fieldManager": FIELD_MANAGER, "force": "true"},
            content_type="application/apply-patch+yaml",
        )

    def apply_status(self, obj: JsonObject) -> JsonObject:
        """Write ``obj``'s status (a Service's load-balancer ingress, say)."""
        kind, metadata = obj["kind"], obj["metadata"]
        body = {
            "apiVersion": KINDS[kind].api_version,
            "kind": kind,
            "metadata": {"name": metadata["name"]},
            "status": obj["status"],
        }
        namespace = metadata.get("namespace", self.namespace)
        return self._request(
            "PATCH",
            path(kind, namespace, metadata["name"], "status"),
            body,
            query={"fieldManager": FIELD_MANAGER, "force": "true"},
            content_type="application/apply-patch+yaml",
        )

    def get(self, kind: str, name: str, namespace: str | None = None) -> JsonObject:
        return self._request("GET", path(kind, self._namespace(kind, namespace), name))

    def delete(self, kind: str, name: str, namespace: str | None = None) -> None:
        self._request("DELETE", path(kind, self._namespace(kind, namespace), name))

    def merge_patch(self, kind: str, name: str, patch: JsonObject) -> JsonObject:
        return self._request(
            "PATCH",
            path(kind, self._namespace(kind, None), name),
            patch,
            content_type="application/merge-patch+json",
        )

    def list_items(self, kind: str, namespace: str = "") -> list[JsonObject]:
        """Every object of ``kind`` (in ``namespace``, or everywhere), with kind and apiVersion
        set as a manifest has them."""
        items: list[JsonObject] = self._request("GET", path(kind, namespace))["items"]
        return [{"apiVersion": KINDS[kind].api_version, "kind": kind, **i} for i in items]

    def service_account(self, name: str) -> str:
        """A ServiceAccount in this namespace, and a real signed token for it."""
        self.apply({"kind": "ServiceAccount", "metadata": {"name": name}})
        return self.control_plane.service_account_token(self.namespace, name)

    def grant(self, account: str, rules: list[JsonObject]) -> None:
        """A ClusterRole of ``rules`` bound to this namespace's ``account``; granting again
        replaces the rules."""
        name = f"{self.namespace}.{account}"
        self.apply({"kind": "ClusterRole", "metadata": {"name": name}, "rules": rules})
        self.apply(
            {
                "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": name},
                "subjects": [
                    {"kind": "ServiceAccount", "name": account, "namespace": self.namespace}
                ],
            }
        )

    def kubeconfig_with(self, token: str, name: str) -> Path:
        """A kubeconfig for the same server that authenticates with ``token``."""
        return self.control_plane.write_kubeconfig(self.folder / f"{name}.kubeconfig", token)

    def cleanup(self) -> None:
        """Delete what this test made that another test could see."""
        for kind in LISTED_KINDS:
            self._request("DELETE", path(kind, self.namespace))
        for kind, name in reversed(list(self._cluster_wide)):
            if kind == "Namespace":
                continue
            try:
                if kind == "Node":
                    # A finalizer a test set would keep the Node, deleted, for ever.
                    self.merge_patch("Node", name, {"metadata": {"finalizers": None}})
                self.delete(kind, name)
            except ApiError as error:
                if error.status != 404:
                    raise

    def _namespace(self, kind: str, namespace: str | None) -> str:
        return (namespace or self.namespace) if KINDS[kind].namespaced else ""

    def _request(
        self,
        method: str,
        api_path: str,
        body: JsonObject | None = None,
        *,
        query: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> JsonObject:
        target = f"{api_path}?{urlencode(query)}" if query else api_path
        return self.control_plane.request(method, target, body, content_type=content_type)
