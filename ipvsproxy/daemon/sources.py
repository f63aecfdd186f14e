"""Where the daemon's cluster comes from: the API server's watches, or manifest files."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple, Protocol

from ipvsproxy.cluster.informer import ClusterInformer
from ipvsproxy.cluster.manifest_file import DEFAULT_MAX_FILE_SIZE
from ipvsproxy.cluster.source import (
    ManifestFolder,
    Refresh,
    SourceError,
    no_services,
)
from ipvsproxy.model import ChangedKeys, ClusterSnapshot, Rejection
from ipvsproxy.supervise import Supervisor, Worker

log = logging.getLogger(__name__)


class Reading(NamedTuple):
    snapshot: ClusterSnapshot
    rejections: list[Rejection]
    # The Services and EndpointSlices that may have changed since the previous reading;
    # None when the source cannot tell (after a relist).
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


# A reading that would delete more than this share of the services the last one programmed
# waits until the folder has been stable for ``STABLE_POLLS`` polls: a folder being re-created
# and filled one file at a time must not be programmed file by file.
MASS_DELETION_SHARE = 0.5
STABLE_POLLS = 2


class FileSource:
    """A manifest file or folder, polled: each poll reads again only the files that changed.

    A reading that cannot be used (a file that does not parse, is too big, cannot be opened;
    no Service at all) is reported once and the last good reading is kept: a half-written
    manifest must not remove every service. One that would delete more than half of the last
    good reading's services waits until the folder has been stable for two polls (or until a
    later reading deletes nothing). The polling thread is a worker of ``workers``.
    """

    def __init__(
        self,
        path: Path,
        node_name: str,
        on_change: Callable[[], None],
        *,
        poll_interval: float = 0.5,
        max_file_size: int = DEFAULT_MAX_FILE_SIZE,
        workers: Supervisor | None = None,
    ) -> None:
        self._path = path
        self._folder = ManifestFolder(path, node_name, max_file_size)
        self._on_change = on_change
        self._poll_interval = poll_interval
        self._lock = threading.Lock()
        self._current: tuple[ClusterSnapshot, list[Rejection]] | None = None
        # What changed between the reading ``snapshot`` last returned and the current one.
        self._untaken = ChangedKeys(frozenset(), frozenset())
        self._reported: set[str] = set()
        self._quiet_polls = 0
        self._holding = False
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
            changed, self._untaken = self._untaken, ChangedKeys(frozenset(), frozenset())
            return Reading(*self._current, changed)

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.poll_once()
            self._stop.wait(self._poll_interval)

    def poll_once(self) -> None:
        """Read what changed, and publish the reading if it is good (and not held back)."""
        try:
            refresh = self._folder.refresh()
        except SourceError as error:
            self._quiet_polls = 0
            self._report([str(error)])
            return
        quiet = not refresh.changed and not self._folder.problems
        self._quiet_polls = self._quiet_polls + 1 if quiet else 0
        problems = self._folder.problems
        if not problems and not self._folder.services:
            problems = [no_services(self._path)]
        self._report(problems)
        if problems or not self._folder.changed or self._held_back():
            return
        self._publish(refresh)

    def _report(self, problems: list[str]) -> None:
        """Log each problem once, when it appears."""
        for problem in problems:
            if problem not in self._reported:
                log.warning("%s; keeping the last good reading", problem)
        self._reported = set(problems)

    def _held_back(self) -> bool:
        """Whether the reading deletes too much to be used before the folder is stable."""
        last = self._current[0].services if self._current is not None else {}
        removed = self._folder.removed_services(last)
        # Once held, a reading waits until it deletes nothing or the folder is stable: a
        # folder being filled would otherwise be used as soon as it is half full.
        if removed == 0 or (not self._holding and removed <= MASS_DELETION_SHARE * len(last)):
            self._holding = False
            return False
        if self._quiet_polls < STABLE_POLLS:
            if not self._holding:
                log.warning(
                    "%s: this reading would delete %d of the %d services of the last good one; "
                    "waiting until the folder has been stable for %d polls",
                    self._path,
                    removed,
                    len(last),
                    STABLE_POLLS,
                )
            self._holding = True
            return True
        log.warning(
            "%s: stable for %d polls; deleting %d of %d services",
            self._path,
            STABLE_POLLS,
            removed,
            len(last),
        )
        self._holding = False
        return False

    def _publish(self, refresh: Refresh) -> None:
        current = self._folder.snapshot()
        changed = self._folder.take_changes()
        with self._lock:
            self._current = current
            self._untaken = ChangedKeys(
                self._untaken.services | changed.services,
                self._untaken.endpoint_slices | changed.endpoint_slices,
            )
        log.info(
            "read %s",
            self._path,
            extra={"services": len(current[0].services), "files_read": refresh.read},
        )
        self._synced.set()
        self._on_change()
