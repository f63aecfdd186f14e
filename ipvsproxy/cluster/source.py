"""The ``--source PATH`` reader: manifests as users keep them, turned into a ClusterSnapshot.

Accepts YAML or JSON, several documents per file, ``kind: List`` (what
``kubectl get services,endpointslices,nodes -A -o yaml`` prints) and folders of such files
(``manifest_scan`` says which files, ``manifest_file`` what one holds). Each rejection names
its file. Only regular files are read, without blocking, and none larger than
``--source-max-file-size``.

``ManifestFolder`` keeps what each file held and the snapshot they make together: ``refresh``
reads again only the files whose stat changed (and those written too recently for their
stat to tell), and updates the snapshot by what those files held, so a change to one file of
a folder of 10,000 costs one file. ``load_snapshot`` is one refresh of a new one.

A source without a single Service is refused unless ``allow_empty``: planned against the
kernel it would delete every virtual server, which is rarely what a typo in a path meant.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

try:
    # hashlib's own blake2b, without hashlib, which loads OpenSSL first: 80 ms of the command
    # line's start in the lab, where each library read crosses hostfs.
    from _blake2 import blake2b
except ImportError:  # a Python without the module
    from hashlib import blake2b
from types import MappingProxyType
from typing import Any

from ipvsproxy.bounded_load import LoadError
from ipvsproxy.cluster.manifest_file import (
    DEFAULT_MAX_FILE_SIZE,
    Claim,
    Identity,
    claims_of,
    objects_of,
    read_file,
)
from ipvsproxy.cluster.manifest_scan import ScanError, Stamp, path_order, scan, stamp_of
from ipvsproxy.cluster.parse import MISSING_NODE, index_node_addresses
from ipvsproxy.gcpause import without_cyclic_gc
from ipvsproxy.model import (
    ChangedKeys,
    ClusterSnapshot,
    EndpointSlice,
    IPAddress,
    Node,
    ObjectKey,
    Rejection,
    Service,
    SkipReason,
)

# A file written twice within the file system's timestamp granularity keeps its mtime, and
# a rewrite of the same length its size too; such "racily clean" files (git's term) are told
# apart by their content, which is read again while their mtime is this recent.
RACY_WINDOW_NS = 2_000_000_000


class SourceError(Exception):
    """A source file or folder could not be read or parsed; the message is one line."""


def no_services(path: Path) -> str:
    return (
        f"{path}: no Service found; planning with none would remove every virtual server "
        "(pass --allow-empty if that is meant)"
    )


@dataclass(slots=True)
class _FileReading:
    stamp: Stamp
    # Of the content read; b"" when the file was refused unread.
    digest: bytes
    claims: dict[Identity, Claim]
    # Rejections of the file's own: duplicate keys and objects, objects without identity.
    rejections: list[Rejection]
    # Why the file cannot be used (the reading is not good while it is so); None if it can.
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class Refresh:
    """What one ``refresh`` did."""

    # Files opened and read.
    read: int
    # A file was added, removed or changed in content since the refresh before.
    changed: bool


class ManifestFolder:
    """A manifest file or folder, read file by file into one snapshot, kept current by
    ``refresh``. Not thread-safe: one thread refreshes, and hands snapshots to others."""

    def __init__(
        self, root: Path, node_name: str | None, max_file_size: int = DEFAULT_MAX_FILE_SIZE
    ) -> None:
        self.root = root
        self._node_name = node_name
        self._max_file_size = max_file_size
        # By path as a string (see manifest_scan.path_order).
        self._files: dict[str, _FileReading] = {}
        self._not_read: dict[str, str] = {}
        self._file_problems: dict[str, str] = {}
        self._file_rejections: dict[str, list[Rejection]] = {}
        self._unreadable: list[str] = []
        self._claims: dict[Identity, dict[str, Claim]] = {}
        self._winners: dict[Identity, Claim] = {}
        self._duplicates: dict[Identity, list[Rejection]] = {}
        self._problems: dict[Identity, tuple[Rejection, ...]] = {}
        self._services: dict[ObjectKey, Service] = {}
        self._slices: dict[ObjectKey, EndpointSlice] = {}
        # This node's whole, the others' names and addresses; and their addresses indexed,
        # the same object until a Node changes (None: to be made again).
        self._nodes: dict[str, Node] = {}
        self._nodes_by_address: Mapping[IPAddress, str] | None = None
        self._touched_services: set[ObjectKey] = set()
        self._touched_slices: set[ObjectKey] = set()
        self._changed = False

    # -- reading ------------------------------------------------------------------------------

    @without_cyclic_gc
    def refresh(self) -> Refresh:
        """Read what changed since the last refresh; SourceError if the path cannot be listed.

        A file that cannot be used (too big, not parseable) is one of ``problems`` until it
        changes; one that cannot be opened now (EMFILE, EACCES) is one until a refresh reads it.
        """
        try:
            found = scan(self.root)
        except ScanError as error:
            raise SourceError(str(error)) from None
        now = time.time_ns()
        changes: dict[str, _FileReading | None] = dict.fromkeys(
            self._files.keys() - found.files.keys()
        )
        unreadable: list[str] = []
        read = 0
        for path, status in found.files.items():
            known = self._files.get(path)
            racy = now - status.st_mtime_ns < RACY_WINDOW_NS
            if known is not None and known.stamp == stamp_of(status) and not racy:
                continue
            try:
                data, stamp = read_file(path, self._max_file_size)
            except LoadError as error:
                refused = _FileReading(stamp_of(status), b"", {}, [], f"{path}: {error}")
                if known is None or (known.stamp, known.problem) != (
                    refused.stamp,
                    refused.problem,
                ):
                    changes[path] = refused
                continue
            except FileNotFoundError:  # removed since the scan
                if known is not None:
                    changes[path] = None
                continue
            except OSError as error:
                unreadable.append(f"{path}: cannot read: {error.strerror or error}")
                continue
            read += 1
            digest = blake2b(data).digest()
            if known is not None and known.digest == digest:
                known.stamp = stamp
                continue
            changes[path] = self._reading(path, data, stamp, digest)
        for path in sorted(changes, key=path_order):
            self._replace(path, changes[path])
        changed = bool(changes) or found.not_read != self._not_read
        self._not_read = found.not_read
        self._unreadable = unreadable
        self._changed |= changed
        return Refresh(read, changed)

    def _reading(self, path: str, data: bytes, stamp: Stamp, digest: bytes) -> _FileReading:
        try:
            claims, rejections = claims_of(path, data, self._node_name)
        except LoadError as error:
            return _FileReading(stamp, digest, {}, [], f"{path}: {error}")
        return _FileReading(stamp, digest, claims, rejections)

    def _replace(self, path: str, reading: _FileReading | None) -> None:
        old = self._files.pop(path, None)
        self._file_problems.pop(path, None)
        self._file_rejections.pop(path, None)
        if old is not None:
            for identity in old.claims:
                claims = self._claims[identity]
                del claims[path]
                if not claims:
                    del self._claims[identity]
        if reading is not None:
            self._files[path] = reading
            if reading.problem is not None:
                self._file_problems[path] = reading.problem
            if reading.rejections:
                self._file_rejections[path] = reading.rejections
            for identity, claim in reading.claims.items():
                self._claims.setdefault(identity, {})[path] = claim
        affected = dict.fromkeys(
            [*(old.claims if old else ()), *(reading.claims if reading else ())]
        )
        for identity in affected:
            self._settle(identity)

    def _settle(self, identity: Identity) -> None:
        """Make the claim of the last file (in path order) the one the snapshot holds."""
        claims = self._claims.get(identity, {})
        files = sorted(claims, key=path_order)
        winner = claims[files[-1]] if files else None
        self._install(self._winners.pop(identity, None), winner)
        self._problems.pop(identity, None)
        self._duplicates.pop(identity, None)
        if winner is None:
            return
        self._winners[identity] = winner
        if winner.problems:
            self._problems[identity] = winner.problems
        if len(files) > 1:
            self._duplicates[identity] = [
                Rejection(
                    claims[later].description,
                    f"also defined in {earlier}; this later one is used",
                    SkipReason.DUPLICATE,
                )
                for earlier, later in pairwise(files)
            ]

    def _install(self, old: Claim | None, new: Claim | None) -> None:
        before = old.item if old is not None else None
        after = new.item if new is not None else None
        if before is after:
            return
        if isinstance(before, Service) and self._services.get(before.key) is before:
            del self._services[before.key]
            self._touched_services.add(before.key)
        elif isinstance(before, EndpointSlice) and self._slices.get(before.key) is before:
            del self._slices[before.key]
            self._touched_slices.add(before.key)
        elif isinstance(before, Node) and self._nodes.get(before.name) is before:
            del self._nodes[before.name]
            self._nodes_by_address = None
        if isinstance(after, Service):
            self._services[after.key] = after
            self._touched_services.add(after.key)
        elif isinstance(after, EndpointSlice):
            self._slices[after.key] = after
            self._touched_slices.add(after.key)
        elif isinstance(after, Node):
            self._nodes[after.name] = after
            self._nodes_by_address = None

    # -- what the reading holds ---------------------------------------------------------------

    @property
    def problems(self) -> list[str]:
        """Why the current reading is not good, one line each; empty when it is."""
        return [
            *(self._file_problems[path] for path in sorted(self._file_problems, key=path_order)),
            *self._unreadable,
        ]

    @property
    def services(self) -> Mapping[ObjectKey, Service]:
        return self._services

    @property
    def changed(self) -> bool:
        """Whether anything changed since ``take_changes``."""
        return self._changed

    def removed_services(self, before: Mapping[ObjectKey, Service]) -> int:
        """How many of ``before``'s services (the last snapshot taken) are gone since."""
        return sum(
            1 for key in self._touched_services if key in before and key not in self._services
        )

    def take_changes(self) -> ChangedKeys:
        """The Services and EndpointSlices changed since the last call."""
        changed = ChangedKeys(frozenset(self._touched_services), frozenset(self._touched_slices))
        self._touched_services.clear()
        self._touched_slices.clear()
        self._changed = False
        return changed

    def snapshot(self) -> tuple[ClusterSnapshot, list[Rejection]]:
        """A copy of the snapshot, and every rejection, each naming its file."""
        rejections = [
            *(
                r
                for path in sorted(self._file_rejections, key=path_order)
                for r in self._file_rejections[path]
            ),
            *(
                Rejection(path, self._not_read[path])
                for path in sorted(self._not_read, key=path_order)
            ),
            *(r for duplicates in self._duplicates.values() for r in duplicates),
            *(r for problems in self._problems.values() for r in problems),
        ]
        node = self._nodes.get(self._node_name) if self._node_name is not None else None
        if self._node_name is not None and node is None:
            rejections.append(Rejection(f"Node {self._node_name}", MISSING_NODE))
        if self._nodes_by_address is None:
            self._nodes_by_address = index_node_addresses(self._nodes.values())
        snapshot = ClusterSnapshot(
            services=MappingProxyType(dict(self._services)),
            endpoint_slices=MappingProxyType(dict(self._slices)),
            node=node,
            nodes_by_address=self._nodes_by_address,
        )
        return snapshot, rejections


def load_objects(path: Path, max_file_size: int = DEFAULT_MAX_FILE_SIZE) -> list[Any]:
    """Every object in the file or folder, with List wrappers unpacked."""
    try:
        files = sorted(scan(path).files, key=path_order)
    except ScanError as error:
        raise SourceError(str(error)) from None
    objects: list[Any] = []
    for file in files:
        try:
            objects += objects_of(read_file(file, max_file_size)[0])
        except LoadError as error:
            raise SourceError(f"{file}: {error}") from None
        except OSError as error:
            raise SourceError(f"{file}: cannot read: {error.strerror or error}") from None
    return objects


def load_snapshot(
    path: Path,
    node_name: str | None,
    *,
    allow_empty: bool = False,
    max_file_size: int = DEFAULT_MAX_FILE_SIZE,
) -> tuple[ClusterSnapshot, list[Rejection]]:
    """The snapshot of every manifest under ``path``; each rejection names its file."""
    folder = ManifestFolder(path, node_name, max_file_size)
    folder.refresh()
    if folder.problems:
        raise SourceError(folder.problems[0])
    if not folder.services and not allow_empty:
        raise SourceError(no_services(path))
    return folder.snapshot()
