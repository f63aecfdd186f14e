"""Many API objects created at once: a few threads, each on its own kept-alive connection.

Inside the lab a write costs the API server little against a request's round trip, so eight
writers keep it busy: 50 Services and their EndpointSlices took 27 s one by one on fresh
connections and 4 s this way.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tests.controlplane.cluster import ApiError, ControlPlane

JsonObject = dict[str, Any]
WRITERS = 8
NOT_FOUND = 404

API_VERSIONS = {
    "Service": "v1",
    "Node": "v1",
    "Namespace": "v1",
    "EndpointSlice": "discovery.k8s.io/v1",
}


def collection_path(obj: JsonObject) -> str:
    """Where an object of a kind the tests create is POSTed."""
    namespace = obj["metadata"].get("namespace", "default")
    match obj["kind"]:
        case "Service":
            return f"/api/v1/namespaces/{namespace}/services"
        case "EndpointSlice":
            return f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
        case "Node":
            return "/api/v1/nodes"
        case "Namespace":
            return "/api/v1/namespaces"
    raise ValueError(f"no collection known for kind {obj['kind']}")


def create_all(plane: ControlPlane, objects: Iterable[JsonObject]) -> list[JsonObject]:
    """POST every object, ``WRITERS`` at a time; the created objects, in order. The first
    refusal raises ApiError."""

    def post(obj: JsonObject) -> JsonObject:
        body = {"apiVersion": API_VERSIONS[obj["kind"]], **obj}
        return plane.request("POST", collection_path(obj), body)

    with ThreadPoolExecutor(WRITERS) as pool:
        return list(pool.map(post, objects))


def delete_all(plane: ControlPlane, objects: Iterable[JsonObject]) -> None:
    """DELETE every object, ``WRITERS`` at a time; one already gone is no error."""

    def delete(obj: JsonObject) -> None:
        try:
            plane.request("DELETE", f"{collection_path(obj)}/{obj['metadata']['name']}")
        except ApiError as error:
            if error.status != NOT_FOUND:
                raise

    with ThreadPoolExecutor(WRITERS) as pool:
        list(pool.map(delete, objects))
