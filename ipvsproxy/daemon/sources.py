"""Where the daemon's cluster comes from: the API server's watches, or manifest files."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple, Protocol

from ipvsproxy.cluster.informer import ClusterInformer
from ipvsproxy.cluster.source import MANIFEST_SUFFIXES, SourceError, load_snapshot
from ipvsproxy.model import ChangedKeys, ClusterSnapshot, Rejection
from ipvsproxy.supervise import Supervisor, Worker

log = logging.getLogger(__name__)


class Reading(NamedTuple):
    snapshot: ClusterSnapshot
    rejections: list[Rejection]
    # The Services and EndpointSlices that may have changed since the previous reading;
    # None when the source cannot tell (a relist, a file read again).
    changed: ChangedKeys | None = None


class ClusterSource(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...

    def wait_for_sync(self, timeout: float) -> bool:
        """True once the whole cluster has been read at least once."""
        ...

    def snapshot(self) -> Reading: ...


class ApiSource:
    """The API server, through the informer's list+watch of each resource."""

    def __init__(self, informer: ClusterInformer) -> None:
        self._informer = informer

    def start(self) -> None:
        self._informer.start()

    def stop(self) -> None:
        self._informer.stop()

    def wait_for_sync(self, timeout: float) -> bool:
        return self._informer.wait_for_sync(timeout)

    def snapshot(self) -> Reading:
        return Reading(*self._informer.take_snapshot())


# A file written twice within the file system's timestamp granularity keeps its mtime, and
# a rewrite of the same length its size too; such "racily clean" files (git's term) are told
# apart by their content, which is read only while their mtime is this recent.
RACY_WINDOW_NS = 2_000_000_000

Signature = tuple[tuple[str, int, int, int, bytes], ...]


def signature_of(path: Path, now_ns: int | None = None) -> Signature:
    """What changes when a manifest is written, added or removed: names, inodes, mtimes and
    sizes, and the content digest of files modified too recently for their mtime to tell."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    files = (
        sorted(p for p in path.rglob("*") if p.suffix in MANIFEST_SUFFIXES)
        if path.is_dir()
        else [path]
    )
    found = []
    for file in files:
        try:
            stat = file.stat()
            racy = now_ns - stat.st_mtime_ns < RACY_WINDOW_NS
            digest = hashlib.blake2b(file.read_bytes()).digest() if racy else b""
        except OSError:
            continue
        found.append((str(file), stat.st_ino, stat.st_mtime_ns, stat.st_size, digest))
    return tuple(found)


class FileSource:
    """A manifest file or folder, read again whenever a file in it changes (polled).

    A file that does not parse is reported and the last good reading is kept: a half-written
    manifest must not remove every service. The polling thread is a worker of ``workers``.
    """

    def __init__(
        self,
        path: Path,
        node_name: str,
        on_change: Callable[[], None],
        poll_interval: float = 0.5,
        workers: Supervisor | None = None,
    ) -> None:
        self._path = path
        self._node_name = node_name
        self._on_change = on_change
        self._poll_interval = poll_interval
        self._lock = threading.Lock()
        self._current: tuple[ClusterSnapshot, list[Rejection]] | None = None
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._workers = workers or Supervisor()
        self._worker: Worker | None = None

    def start(self) -> None:
        self._worker = self._workers.spawn("source-files", self._poll, stop=self._stop.set)

    def stop(self) -> None:
        if self._worker is not None:
            self._worker.stop()

    def wait_for_sync(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def snapshot(self) -> Reading:
        with self._lock:
            if self._current is None:
                raise RuntimeError("snapshot() before the first reading")
            return Reading(*self._current)

    def _poll(self) -> None:
        seen: Signature | None = None
        while not self._stop.is_set():
            signature = signature_of(self._path)
            if signature != seen:
                seen = signature
                self._load()
            self._stop.wait(self._poll_interval)

    def _load(self) -> None:
        try:
            current = load_snapshot(self._path, self._node_name)
        except SourceError as error:
            log.warning("%s; keeping the last good reading", error)
            return
        with self._lock:
            self._current = current
        log.info("read %s", self._path, extra={"services": len(current[0].services)})
        self._synced.set()
        self._on_change()
