"""The ``--source PATH`` reader: manifests as users keep them, turned into a ClusterSnapshot.

Accepts YAML or JSON, several documents per file, ``kind: List`` (what
``kubectl get services,endpointslices,nodes -A -o yaml`` prints) and folders of such files;
files and folders whose names start with a dot are not read. Each rejection names its file.
A source without a single Service is refused unless ``allow_empty``: planned against the
kernel it would delete every virtual server, which is rarely what a typo in a path meant.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ipvsproxy.bounded_load import Documents, LoadError, load_documents
from ipvsproxy.cluster.parse import SnapshotBuilder, describe
from ipvsproxy.gcpause import without_cyclic_gc
from ipvsproxy.model import ClusterSnapshot, Rejection, SkipReason

MANIFEST_SUFFIXES = frozenset({".yaml", ".yml", ".json"})
_NAMESPACED = frozenset({"Service", "EndpointSlice"})


class SourceError(Exception):
    """A source file or folder could not be read or parsed; the message is one line."""


def _documents(path: Path) -> Documents:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise SourceError(f"{path}: cannot read: {error}") from error
    try:
        return load_documents(text)
    except LoadError as error:
        raise SourceError(f"{path}: {error}") from None


def _flatten(document: Any) -> Iterator[Any]:
    if isinstance(document, Mapping) and document.get("kind") == "List":
        items = document.get("items") or []
        if isinstance(items, list):
            for item in items:
                yield from _flatten(item)
        return
    if isinstance(document, list):
        for item in document:
            yield from _flatten(item)
        return
    yield document


def _hidden(path: Path, root: Path) -> bool:
    return any(part.startswith(".") for part in path.relative_to(root).parts)


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(
            p
            for p in path.rglob("*")
            if p.is_file() and p.suffix in MANIFEST_SUFFIXES and not _hidden(p, path)
        )
    if not path.exists():
        raise SourceError(f"{path}: no such file or folder")
    return [path]


def _identity(obj: Any) -> tuple[str, str, str] | None:
    """(kind, namespace, name) as the snapshot keys it, for kinds it keeps; else None."""
    if not isinstance(obj, Mapping) or obj.get("kind") not in (*_NAMESPACED, "Node"):
        return None
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping) or not isinstance(metadata.get("name"), str):
        return None
    namespace = (metadata.get("namespace") or "default") if obj["kind"] in _NAMESPACED else ""
    return obj["kind"], str(namespace), metadata["name"]


def _objects(files: list[Path], rejections: list[Rejection]) -> list[tuple[Path, Any]]:
    """Every object with its file, List wrappers unpacked; duplicate keys reported."""
    objects: list[tuple[Path, Any]] = []
    for file in files:
        loaded = _documents(file)
        for document in loaded.documents:
            for obj in _flatten(document):
                repeated = loaded.duplicates_in(obj)
                if repeated:
                    keys = ", ".join(sorted(set(map(repr, repeated))))
                    rejections.append(
                        Rejection(
                            f"{file}: {describe(obj)}",
                            f"duplicate mapping keys {keys}: the last of each is used",
                            SkipReason.DUPLICATE,
                        )
                    )
                objects.append((file, obj))
    return objects


def _latest(objects: list[tuple[Path, Any]], rejections: list[Rejection]) -> list[tuple[Path, Any]]:
    """One object per kind and namespace/name: the last one read, as ``kubectl apply`` keeps."""
    last: dict[tuple[str, str, str], int] = {}
    for index, (file, obj) in enumerate(objects):
        identity = _identity(obj)
        if identity is None:
            continue
        if identity in last:
            earlier = objects[last[identity]][0]
            where = "earlier in the same file" if earlier == file else f"in {earlier}"
            rejections.append(
                Rejection(
                    f"{file}: {describe(obj)}",
                    f"also defined {where}; this later one is used",
                    SkipReason.DUPLICATE,
                )
            )
        last[identity] = index
    chosen = set(last.values())
    return [
        pair for index, pair in enumerate(objects) if _identity(pair[1]) is None or index in chosen
    ]


def load_objects(path: Path) -> list[Any]:
    """Every object in the file or folder, with List wrappers unpacked."""
    return [obj for _, obj in _objects(_files(path), [])]


@without_cyclic_gc
def load_snapshot(
    path: Path, node_name: str | None, *, allow_empty: bool = False
) -> tuple[ClusterSnapshot, list[Rejection]]:
    """The snapshot of every manifest under ``path``; each rejection names its file."""
    rejections: list[Rejection] = []
    builder = SnapshotBuilder(node_name)
    for file, obj in _latest(_objects(_files(path), rejections), rejections):
        rejections += [
            Rejection(f"{file}: {r.object}", r.reason, r.category) for r in builder.add(obj)
        ]
    snapshot, more = builder.build()
    if not snapshot.services and not allow_empty:
        raise SourceError(
            f"{path}: no Service found; planning with none would remove every virtual server "
            "(pass --allow-empty if that is meant)"
        )
    return snapshot, [*rejections, *more]
