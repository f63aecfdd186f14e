"""Keep a ClusterSnapshot current: list, then watch from the list's resourceVersion.

One Reflector per resource, each on its own thread, as client-go's reflector:

* list page by page (each page parsed as it arrives), replace the store, remember the
  list's resourceVersion; an object listed again at the version stored is not parsed again;
* watch from that version; apply ADDED/MODIFIED/DELETED to the store, and move the version
  forward with every event and BOOKMARK, so that a re-watch resumes where the last one ended;
  an event that leaves the parsed object as it was (a Node's heartbeat, when only its name
  and addresses are kept) changes nothing and queues no sync;
* the server ending the stream (its timeoutSeconds) means watch again at once;
* 410 Gone (the version fell out of the server's history) means list again, after a backoff
  of its own, the same doubling with jitter (a server that answers every watch with 410 must
  not be listed in a loop: 283 Node lists in 19 s, and every proxy of a cluster does it);
* any other failure (refused connection, dropped or silent stream, 5xx) means wait, with
  a doubling backoff, then watch again from the same version;
* a line of the stream that is no usable event (not JSON, nested too deep, the wrong shape,
  over 16 MiB) is skipped with one log line, counted, and the stream read on.

Objects are parsed once, as they arrive, into a persistent map: a snapshot is the map as it
stands, and an event costs a copy of one chunk of it, so neither costs the cluster.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, Protocol, TypeVar

from ipvsproxy.cluster.api import (
    ENDPOINT_SLICES,
    NODE_PAGE_SIZE,
    NODES,
    PAGE_SIZE,
    SERVICES,
    EventType,
    MalformedEvent,
    Resource,
    Selectors,
    WatchEvent,
    list_pages,
    proxy_label_selector,
    watch,
)
from ipvsproxy.cluster.connection import ApiConnection, ApiError, LineStream
from ipvsproxy.cluster.parse import (
    MISSING_NODE,
    ParseError,
    index_node_addresses,
    node_parser,
    object_key,
    parse_endpoint_slice,
    parse_service,
)
from ipvsproxy.gcpause import cyclic_gc_paused, freeze_survivors
from ipvsproxy.model import (
    ChangedKeys,
    ClusterSnapshot,
    EndpointSlice,
    IPAddress,
    Node,
    ObjectKey,
    Rejection,
    Service,
)
from ipvsproxy.persistent import PersistentMap
from ipvsproxy.supervise import Supervisor, Worker, stop_all

log = logging.getLogger(__name__)

# client-go watches for a random 5 to 10 minutes before the server ends the stream.
WATCH_TIMEOUT = 300
_GONE = 410

T = TypeVar("T")
Parser = Callable[[Mapping[str, Any]], tuple[T | None, list[Rejection]]]


def _ignore(resource: str) -> None:
    pass


class _Versioned(Protocol):
    @property
    def resource_version(self) -> str: ...


def _resource_version(item: _Versioned) -> str:
    return item.resource_version


def _unversioned(item: object) -> str:
    return ""


def _same_version(obj: Mapping[str, Any], version: str) -> bool:
    metadata = obj.get("metadata")
    return (
        bool(version) and isinstance(metadata, dict) and metadata.get("resourceVersion") == version
    )


@dataclass(frozen=True, slots=True)
class InformerHooks:
    """Called with the resource's name as the API spells it in URLs ("endpointslices"), from
    the reflector's thread."""

    # An object was added, changed or deleted, or the resource was listed.
    changed: Callable[[str], None] = _ignore
    # Listed again after the first list (410 Gone).
    relisted: Callable[[str], None] = _ignore
    # A watch started again after its stream ended or failed.
    watch_restarted: Callable[[str], None] = _ignore
    # A watch stream carried a line that is no usable event (skipped).
    malformed_event: Callable[[str], None] = _ignore


@dataclass(frozen=True, slots=True)
class Backoff:
    """Doubling delays between failed attempts, as client-go's reflector (0.8 s to 30 s), each
    stretched by up to ``jitter`` times itself so that the proxies of a cluster, all cut off by
    the same API server restart, do not come back in step."""

    initial: float = 0.8
    maximum: float = 30.0
    jitter: float = 1.0

    def delays(self) -> Iterator[float]:
        delay = self.initial
        while True:
            yield delay * (1 + self.jitter * random.random())
            delay = min(delay * 2, self.maximum)


class Reflector(Generic[T]):
    """One resource mirrored into a store of parsed objects, kept current by ``run``."""

    def __init__(
        self,
        api: ApiConnection,
        resource: Resource,
        parse: Parser[T],
        *,
        selectors: Selectors,
        # The resourceVersion a parsed object came from, "" if it does not keep it.
        version_of: Callable[[T], str] = _unversioned,
        page_size: int = PAGE_SIZE,
        watch_timeout: int = WATCH_TIMEOUT,
        backoff: Backoff = Backoff(),
        on_change: Callable[[], None] = lambda: None,
        hooks: InformerHooks = InformerHooks(),
    ) -> None:
        self._api = api
        self.resource = resource
        self._hooks = hooks
        self._parse = parse
        self._version_of = version_of
        self._selectors = selectors
        self._page_size = page_size
        self._watch_timeout = watch_timeout
        self._backoff = backoff
        self._on_change = on_change
        self._lock = threading.Lock()
        self._store: PersistentMap[ObjectKey, T] = PersistentMap()
        self._rejections: dict[ObjectKey, list[Rejection]] = {}
        # The problems of the objects in the store, as one list; None: to be made again.
        self._problems: list[Rejection] | None = []
        # Keys added, changed or deleted since ``take_items``; None: unknown (a list came).
        self._touched: set[ObjectKey] | None = None
        # Moves on whenever the store does.
        self._generation = 0
        self._resource_version = ""
        self._stream: LineStream | None = None
        self._closed = False
        self.synced = threading.Event()

    @property
    def resource_version(self) -> str:
        with self._lock:
            return self._resource_version

    @property
    def generation(self) -> int:
        """A number that changes whenever the store does: what was made of the store at one
        generation holds until it changes."""
        with self._lock:
            return self._generation

    def items(self) -> tuple[Mapping[ObjectKey, T], list[Rejection]]:
        """The store as it stands (immutable), and the problems of the objects in it."""
        with self._lock:
            return self._current()

    def take_items(
        self,
    ) -> tuple[Mapping[ObjectKey, T], list[Rejection], frozenset[ObjectKey] | None]:
        """``items``, and the keys touched since the last call (None: any may have changed)."""
        with self._lock:
            touched, self._touched = self._touched, set()
            return *self._current(), None if touched is None else frozenset(touched)

    def _current(self) -> tuple[Mapping[ObjectKey, T], list[Rejection]]:
        if self._problems is None:
            self._problems = [r for problems in self._rejections.values() for r in problems]
        return self._store, list(self._problems)

    def relist(self) -> None:
        """List again, parsing each page as it arrives (the list's JSON is never held whole).

        An object whose resourceVersion is that of the one stored is the same object: the
        parsed one is kept (and its problems), so a relist after 410 Gone costs what changed.
        """
        with self._lock:
            known, known_rejections = self._store, self._rejections
        store: dict[ObjectKey, T] = {}
        rejections: dict[ObjectKey, list[Rejection]] = {}
        version = ""
        # One pause of the collector across the list: each page's JSON is freed before any
        # collection could walk it, and what is parsed is walked once, by the freeze after.
        # The list is bounded by the API timeouts; the collector's pause by the list.
        with cyclic_gc_paused():
            for page in list_pages(self._api, self.resource, self._selectors, self._page_size):
                if page.restart:
                    store.clear()
                    rejections.clear()
                for obj in page.items:
                    key = self._key(obj)
                    if key is None:
                        continue
                    kept = known.get(key)
                    if kept is not None and _same_version(obj, self._version_of(kept)):
                        store[key] = kept
                        if key in known_rejections:
                            rejections[key] = known_rejections[key]
                        continue
                    item, problems = self._parse(obj)
                    if item is not None:
                        store[key] = item
                    if problems:
                        rejections[key] = problems
                version = page.resource_version
        freeze_survivors()  # the store is long-lived: later collections need not walk it
        with self._lock:
            self._store, self._rejections = PersistentMap(store), rejections
            self._problems = None
            self._touched = None
            self._resource_version = version
            self._generation += 1
        if self.synced.is_set():
            self._hooks.relisted(self.resource.plural.lower())
        self.synced.set()
        self._hooks.changed(self.resource.plural.lower())
        self._on_change()

    def watch_once(self) -> int:
        """Apply one watch stream's events until the server ends it; failures raise ApiError.

        Returns how many events (bookmarks included) the stream carried.
        """
        # As client-go: spread the re-watches of many proxies over time.
        timeout = round(self._watch_timeout * (1 + random.random()))
        stream, events = watch(
            self._api, self.resource, self._selectors, self.resource_version, timeout
        )
        with self._lock:
            self._stream = stream
            closed = self._closed
        if closed:
            stream.close()
        count = 0
        try:
            for event in events:
                if isinstance(event, MalformedEvent):
                    log.warning("%s; skipped it", event.reason)
                    self._hooks.malformed_event(self.resource.plural.lower())
                    continue
                self._apply(event)
                count += 1
        finally:
            with self._lock:
                self._stream = None
        return count

    def run(self, stop: threading.Event) -> None:
        """List, then watch, until ``stop`` is set (then call ``close``); never raises."""
        must_list = True
        delays = self._backoff.delays()
        # Relists after 410 back off on their own: the first after an outage need not wait
        # what the outage's failures piled up, but a server answering 410 to every watch is
        # listed less and less often.
        relist_delays = self._backoff.delays()
        watched = False
        while not stop.is_set():
            try:
                if watched:
                    self._hooks.watch_restarted(self.resource.plural.lower())
                watched = True
                if must_list:
                    self.relist()
                    must_list = False
                if self.watch_once():
                    delays = self._backoff.delays()
                    relist_delays = self._backoff.delays()
                    continue
                # An empty stream, as client-go's "very short watch": do not hammer the server.
                delay = next(delays)
            except ApiError as error:
                if stop.is_set():
                    return
                if error.status == _GONE and not must_list:
                    delay = next(relist_delays)
                    log.info("%s; listing %s again in %.1f s", error, self.resource.plural, delay)
                    must_list = True
                else:
                    delay = next(delays)
                    log.warning("%s; retrying in %.1f s", error, delay)
            # A bug must not end the thread that keeps the proxy's view of the cluster.
            except Exception:
                delay = next(delays)
                log.exception(
                    "%s: unexpected error; retrying in %.1f s", self.resource.plural, delay
                )
            stop.wait(delay)

    def close(self) -> None:
        """End the current watch stream, and any later one, from another thread."""
        with self._lock:
            self._closed = True
            stream = self._stream
        if stream is not None:
            stream.close()

    def _key(self, obj: Mapping[str, Any]) -> ObjectKey | None:
        try:
            return object_key(obj, namespaced=self.resource.namespaced)
        except ParseError as error:
            log.warning("%s: skipped an object: %s", self.resource.plural, error)
            return None

    def _apply(self, event: WatchEvent) -> None:
        if event.type is EventType.BOOKMARK:
            with self._lock:
                self._resource_version = event.resource_version
            return
        key = self._key(event.object)
        if key is None:
            return
        item, problems = (
            (None, []) if event.type is EventType.DELETED else self._parse(event.object)
        )
        with self._lock:
            self._resource_version = event.resource_version
            if self._store.get(key) == item and self._rejections.get(key, []) == problems:
                return
            self._store = self._store.updated(
                None if item is None else {key: item}, () if item is not None else (key,)
            )
            if self._rejections.pop(key, None) is not None or problems:
                self._problems = None
            if problems:
                self._rejections[key] = problems
            if self._touched is not None:
                self._touched.add(key)
            self._generation += 1
        self._hooks.changed(self.resource.plural.lower())
        self._on_change()


class ClusterInformer:
    """Services, EndpointSlices and Nodes, each kept current by a Reflector: of the Nodes this
    proxy's whole, of the others their addresses alone.

    ``on_change`` is called (from a reflector thread) after every change; ``take_snapshot`` may be
    called from any thread. Selectors match ``read_cluster``'s, so both see the same cluster.
    The reflectors' threads are workers of ``workers``.
    """

    def __init__(
        self,
        api: ApiConnection,
        node_name: str,
        *,
        service_proxy_name: str = "",
        page_size: int = PAGE_SIZE,
        watch_timeout: int = WATCH_TIMEOUT,
        backoff: Backoff = Backoff(),
        on_change: Callable[[], None] = lambda: None,
        hooks: InformerHooks = InformerHooks(),
        workers: Supervisor | None = None,
    ) -> None:
        self.node_name = node_name
        proxied = Selectors(labels=proxy_label_selector(service_proxy_name))
        options: dict[str, Any] = {
            "watch_timeout": watch_timeout,
            "backoff": backoff,
            "on_change": on_change,
            "hooks": hooks,
        }
        self.services = Reflector(
            api,
            SERVICES,
            parse_service,
            selectors=proxied,
            version_of=_resource_version,
            page_size=page_size,
            **options,
        )
        self.endpoint_slices = Reflector(
            api,
            ENDPOINT_SLICES,
            parse_endpoint_slice,
            selectors=proxied,
            version_of=_resource_version,
            page_size=page_size,
            **options,
        )
        self.nodes = Reflector(
            api,
            NODES,
            node_parser(node_name),
            selectors=Selectors(),
            page_size=min(page_size, NODE_PAGE_SIZE),
            **options,
        )
        self._reflectors: tuple[Reflector[Any], ...] = (
            self.services,
            self.endpoint_slices,
            self.nodes,
        )
        # What the snapshots take of the Nodes, made again only when they change.
        self._node_view: _NodeView | None = None
        self._stop = threading.Event()
        self._workers = workers or Supervisor()
        self._running: list[Worker] = []

    def start(self) -> None:
        self._running = [
            self._workers.spawn(
                f"informer-{reflector.resource.plural}",
                partial(reflector.run, self._stop),
                stop=self._stop.set,
            )
            for reflector in self._reflectors
        ]

    def stop(self, timeout: float = 10.0) -> None:
        for worker in self._running:
            worker.request_stop()
        self._stop.set()
        for reflector in self._reflectors:
            reflector.close()
        stop_all(self._running, timeout)
        self._running.clear()

    def wait_for_sync(self, timeout: float) -> bool:
        """True once every resource has been listed, as kube-proxy waits before its first sync."""
        return all(reflector.synced.wait(timeout) for reflector in self._reflectors)

    def take_snapshot(self) -> tuple[ClusterSnapshot, list[Rejection], ChangedKeys | None]:
        """The cluster as the caches hold it, and the Services and EndpointSlices touched since
        the last call (None: any may have changed)."""
        services, service_problems, touched_services = self.services.take_items()
        slices, slice_problems, touched_slices = self.endpoint_slices.take_items()
        snapshot, rejections = self._snapshot(
            (services, service_problems), (slices, slice_problems)
        )
        changed = (
            None
            if touched_services is None or touched_slices is None
            else ChangedKeys(touched_services, touched_slices)
        )
        return snapshot, rejections, changed

    def _snapshot(
        self,
        services: tuple[Mapping[ObjectKey, Service], list[Rejection]],
        slices: tuple[Mapping[ObjectKey, EndpointSlice], list[Rejection]],
    ) -> tuple[ClusterSnapshot, list[Rejection]]:
        view = self._nodes_now()
        rejections = [*services[1], *slices[1], *view.problems]
        if view.node is None:
            rejections.append(Rejection(f"Node {self.node_name}", MISSING_NODE))
        snapshot = ClusterSnapshot(
            services=services[0],
            endpoint_slices=slices[0],
            node=view.node,
            nodes_by_address=view.by_address,
        )
        return snapshot, rejections

    def _nodes_now(self) -> _NodeView:
        """The Nodes as the snapshots take them: the same objects while no Node changes, so a
        snapshot costs nothing per node, and unchanged addresses are seen unchanged at once."""
        generation = self.nodes.generation
        view = self._node_view
        if view is None or view.generation != generation:
            nodes, problems = self.nodes.items()
            view = _NodeView(
                generation,
                nodes.get(ObjectKey("", self.node_name)),
                index_node_addresses(nodes.values()),
                problems,
            )
            self._node_view = view
        return view


@dataclass(frozen=True, slots=True)
class _NodeView:
    # The reflector's generation this was made at (a later store may have gone in: made again).
    generation: int
    node: Node | None
    by_address: Mapping[IPAddress, str]
    problems: list[Rejection]
