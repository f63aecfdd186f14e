"""The cluster as the API server has it: Services, EndpointSlices and the Nodes.

Lists are fetched as raw JSON page by page (the generated model classes cost too much at
10,000 services) and handed to ``parse``, so the API and ``--source`` give the same snapshot.
Each list's resourceVersion is kept for the watch that follows it; ``watch`` streams the
raw events from there.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ipvsproxy.cluster.connection import (
    ApiConnection,
    ApiError,
    LineStream,
    OversizedLine,
    Request,
    open_stream,
    request_json,
)
from ipvsproxy.cluster.parse import SnapshotBuilder
from ipvsproxy.model import ClusterSnapshot, Rejection
from ipvsproxy.names import PROXY_NAME_LABEL

HEADLESS_LABEL = "service.kubernetes.io/headless"
# client-go's pager default.
PAGE_SIZE = 500
# A Node's JSON lists its container images, tens of KB a node: fewer to a page than other kinds.
NODE_PAGE_SIZE = 100
# client-go's streaming decoder refuses a watch event longer than this.
MAX_EVENT_BYTES = 16 << 20
_GONE = 410


@dataclass(frozen=True, slots=True)
class Resource:
    """One listable kind: its name in messages and the path that lists it in all namespaces."""

    kind: str
    plural: str
    path: str
    namespaced: bool = True


SERVICES = Resource("Service", "Services", "/api/v1/services")
ENDPOINT_SLICES = Resource(
    "EndpointSlice", "EndpointSlices", "/apis/discovery.k8s.io/v1/endpointslices"
)
NODES = Resource("Node", "Nodes", "/api/v1/nodes", namespaced=False)


class EventType(enum.StrEnum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    BOOKMARK = "BOOKMARK"


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: EventType
    object: dict[str, Any]

    @property
    def resource_version(self) -> str:
        return str(self.object.get("metadata", {}).get("resourceVersion") or "")


@dataclass(frozen=True, slots=True)
class MalformedEvent:
    """A line of a watch stream that is not an event we can use; ``reason`` is one line."""

    reason: str


@dataclass(frozen=True, slots=True)
class Selectors:
    """Server-side filters, sent the same way on the list and on the watch that follows it."""

    labels: str = ""
    fields: str = ""

    def params(self) -> dict[str, str]:
        return {
            name: value
            for name, value in (("labelSelector", self.labels), ("fieldSelector", self.fields))
            if value
        }


@dataclass(frozen=True, slots=True)
class Listing:
    """Every object of one kind (as API JSON, ``kind`` filled in) at one resourceVersion."""

    items: list[dict[str, Any]]
    resource_version: str


@dataclass(frozen=True, slots=True)
class ClusterRead:
    """What ``read_cluster`` found, with each list's resourceVersion for a later watch."""

    snapshot: ClusterSnapshot
    rejections: list[Rejection]
    services_version: str
    endpoint_slices_version: str


def proxy_label_selector(service_proxy_name: str = "") -> str:
    """kube-proxy's server-side filter, agreeing with translate on which services are ours.

    Headless services are skipped, and so are services labelled for another proxy; with a
    ``service_proxy_name``, only the services labelled with that name are ours.
    """
    proxy = (
        f"{PROXY_NAME_LABEL}={service_proxy_name}" if service_proxy_name else f"!{PROXY_NAME_LABEL}"
    )
    return f"{proxy},!{HEADLESS_LABEL}"


class _ContinueExpired(Exception):
    pass


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a list, its items as API JSON with ``kind`` filled in."""

    items: list[dict[str, Any]]
    # The list's resourceVersion (the last page's is the one to watch from).
    resource_version: str
    # The first page of the list fetched again whole: the pages before it are void.
    restart: bool = False


def _page_items(body: Any, resource: Resource) -> tuple[list[dict[str, Any]], Mapping[str, Any]]:
    if not isinstance(body, dict) or not isinstance(body.get("items") or [], list):
        raise ApiError(f"listing {resource.plural}: the API server sent something not a list")
    metadata = body.get("metadata")
    items = [
        # List items come without TypeMeta; parse dispatches on kind.
        {**item, "kind": resource.kind} if isinstance(item, dict) else item
        for item in body.get("items") or []
    ]
    return items, metadata if isinstance(metadata, dict) else {}


def _pages(
    api: ApiConnection, resource: Resource, selectors: Selectors, page_size: int | None
) -> Iterator[Page]:
    token = ""
    while True:
        query = selectors.params()
        if page_size:
            query["limit"] = str(page_size)
        if token:
            query["continue"] = token
        try:
            body = request_json(
                api, f"listing {resource.plural}", Request("GET", resource.path, query)
            )
        except ApiError as error:
            if token and error.status == _GONE:
                raise _ContinueExpired from error
            raise
        items, metadata = _page_items(body, resource)
        yield Page(items, str(metadata.get("resourceVersion") or ""))
        token = str(metadata.get("continue") or "")
        if not token:
            return


def list_pages(
    api: ApiConnection, resource: Resource, selectors: Selectors, page_size: int = PAGE_SIZE
) -> Iterator[Page]:
    """Every object of ``resource`` matching ``selectors``, in pages of ``page_size``, each
    fetched when the one before has been consumed (so a consumer that parses each page holds
    one page of JSON at a time, not the whole list).

    A continue token that expires mid-list (410 Gone) makes the pages so far worthless: as
    client-go's pager does, the list is fetched again whole, in one request, marked ``restart``.
    """
    try:
        yield from _pages(api, resource, selectors, page_size)
    except _ContinueExpired:
        for page in _pages(api, resource, selectors, page_size=None):
            yield Page(page.items, page.resource_version, restart=True)


def list_all(
    api: ApiConnection, resource: Resource, selectors: Selectors, page_size: int = PAGE_SIZE
) -> Listing:
    """Every object of ``resource`` matching ``selectors`` at once (see ``list_pages``)."""
    items: list[dict[str, Any]] = []
    version = ""
    for page in list_pages(api, resource, selectors, page_size):
        if page.restart:
            items.clear()
        items.extend(page.items)
        version = page.resource_version
    return Listing(items, version)


def decode_watch_line(
    line: bytes | OversizedLine, resource: Resource
) -> WatchEvent | MalformedEvent:
    """The event on one line of a watch stream; an ERROR event raises ApiError with its code."""
    sent = f"watching {resource.plural}: the API server sent"
    if isinstance(line, OversizedLine):
        return MalformedEvent(
            f"{sent} an event of {line.size} bytes or more, over the bound of {MAX_EVENT_BYTES}"
        )
    try:
        raw = json.loads(line)
    except RecursionError:
        return MalformedEvent(f"{sent} an event nested too deep to decode")
    except ValueError:
        return MalformedEvent(f"{sent} an event that is not JSON")
    obj = raw.get("object") if isinstance(raw, dict) else None
    if not isinstance(obj, dict):
        return MalformedEvent(f"{sent} an event without an object")
    if raw.get("type") == "ERROR":
        code = obj.get("code")
        message = obj.get("message") or obj.get("reason") or "unknown error"
        raise ApiError(
            f"watching {resource.plural}: {code} {message}",
            code if isinstance(code, int) else None,
        )
    try:
        event_type = EventType(str(raw.get("type")))
    except ValueError:
        return MalformedEvent(f"{sent} an event of unknown type {str(raw.get('type'))[:40]!r}")
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict) or not isinstance(metadata.get("resourceVersion", ""), str):
        return MalformedEvent(f"{sent} a {event_type} event whose metadata is not an object")
    return WatchEvent(event_type, {**obj, "kind": resource.kind})


def watch(
    api: ApiConnection,
    resource: Resource,
    selectors: Selectors,
    resource_version: str,
    timeout_seconds: int,
) -> tuple[LineStream, Iterator[WatchEvent | MalformedEvent]]:
    """Open a watch from ``resource_version``: the stream (to close) and its events.

    The events end when the server ends the stream after ``timeout_seconds``. An ERROR
    event raises ApiError with the Status code: 410 means the version is too old, relist.
    A line that is no usable event (not JSON, nested too deep, of the wrong shape, longer than
    MAX_EVENT_BYTES) comes as a MalformedEvent, and the stream goes on.
    A stream silent for longer than the timeout plus the read timeout is taken as dead.
    """
    query = {
        "watch": "true",
        "allowWatchBookmarks": "true",
        "resourceVersion": resource_version,
        "timeoutSeconds": str(timeout_seconds),
        **selectors.params(),
    }
    stream = open_stream(
        api,
        f"watching {resource.plural}",
        Request("GET", resource.path, query),
        read_timeout=timeout_seconds + api.timeouts.read,
        max_line=MAX_EVENT_BYTES,
    )
    return stream, (decode_watch_line(line, resource) for line in stream)


def read_cluster(
    api: ApiConnection,
    node_name: str,
    *,
    service_proxy_name: str = "",
    page_size: int = PAGE_SIZE,
) -> ClusterRead:
    """One consistent read of what the proxy needs; raises ApiError (one line) on failure.

    The Nodes are parsed page by page, as they arrive: of all but ``node_name`` only the
    addresses are kept, never the whole list's JSON.
    """
    selectors = Selectors(labels=proxy_label_selector(service_proxy_name))
    services = list_all(api, SERVICES, selectors, page_size)
    slices = list_all(api, ENDPOINT_SLICES, selectors, page_size)
    builder = SnapshotBuilder(node_name)
    rejections: list[Rejection] = []
    for page in list_pages(api, NODES, Selectors(), min(page_size, NODE_PAGE_SIZE)):
        if page.restart:
            builder.forget_nodes()
            rejections.clear()
        for obj in page.items:
            rejections += builder.add(obj)
    for obj in [*services.items, *slices.items]:
        rejections += builder.add(obj)
    snapshot, more = builder.build()
    return ClusterRead(
        snapshot, [*rejections, *more], services.resource_version, slices.resource_version
    )
