"""What one manifest file holds: its objects, each identity's last one parsed, and the file's
own rejections (duplicate keys and objects, objects that name nothing the snapshot keeps).

A file is read as a regular file only, without blocking, and no larger than
``--source-max-file-size`` (bounded_load.read_bounded); its text is loaded within the bounds
of bounded_load. Every rejection names the file.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ipvsproxy.bounded_load import Documents, LoadError, load_each, read_bounded
from ipvsproxy.cluster.manifest_scan import Stamp, stamp_of
from ipvsproxy.cluster.parse import ParsedObject, describe, parse_object
from ipvsproxy.model import Rejection, SkipReason

MAX_FILE_SIZE_FLAG = "--source-max-file-size"
# Our bench's 10,000 services x 10 endpoints, as `kubectl get -o json` indents them, is 48.5 MB.
DEFAULT_MAX_FILE_SIZE = 64 << 20
_NAMESPACED = frozenset({"Service", "EndpointSlice"})

# (kind, namespace, name), as the snapshot keys an object.
Identity = tuple[str, str, str]


def flatten(document: Any) -> Iterator[Any]:
    """The objects of a document: ``kind: List`` items and plain lists unpacked."""
    if isinstance(document, Mapping) and document.get("kind") == "List":
        items = document.get("items") or []
        if isinstance(items, list):
            for item in items:
                yield from flatten(item)
        return
    if isinstance(document, list):
        for item in document:
            yield from flatten(item)
        return
    yield document


def _identity(obj: Any) -> Identity | None:
    """(kind, namespace, name) as the snapshot keys it, for kinds it keeps; else None."""
    if not isinstance(obj, Mapping) or obj.get("kind") not in (*_NAMESPACED, "Node"):
        return None
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping) or not isinstance(metadata.get("name"), str):
        return None
    namespace = (metadata.get("namespace") or "default") if obj["kind"] in _NAMESPACED else ""
    return obj["kind"], str(namespace), metadata["name"]


def read_file(path: str, max_file_size: int) -> tuple[bytes, Stamp]:
    """The file's bytes and stamp as opened; LoadError for a refusal, OSError passes."""
    data, opened = read_bounded(path, max_file_size, f"({MAX_FILE_SIZE_FLAG})")
    return data, stamp_of(opened)


def text_of(data: bytes) -> str:
    """A file's bytes as text; LoadError (one line, without the file's name)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise LoadError(f"cannot read: {error}") from None


def objects_of(data: bytes) -> list[Any]:
    """Every object of a file's bytes, List wrappers unpacked; LoadError (one line)."""
    return load_each(text_of(data), _objects)


def _objects(loaded: Iterable[Documents]) -> list[Any]:
    return [obj for obj, _ in _each_object(loaded)]


def _each_object(loaded: Iterable[Documents]) -> Iterator[tuple[Any, Documents]]:
    """Every object of the documents, List wrappers unpacked, with the Documents it is of."""
    for documents in loaded:
        for document in documents.documents:
            for obj in flatten(document):
                yield obj, documents


@dataclass(frozen=True, slots=True)
class Claim:
    """One file's (last) object of an identity, parsed."""

    description: str
    item: ParsedObject | None
    problems: tuple[Rejection, ...]


def _prefixed(path: str, rejections: list[Rejection]) -> list[Rejection]:
    return [Rejection(f"{path}: {r.object}", r.reason, r.category) for r in rejections]


def claims_of(
    path: str, data: bytes, node_name: str | None
) -> tuple[dict[Identity, Claim], list[Rejection]]:
    """The file's claims (the last object of each identity, parsed) and its own rejections;
    LoadError (one line, without the file's name) for a file that cannot be loaded.

    Each object is parsed as it comes, so of a JSON List only one item is held unparsed."""
    return load_each(text_of(data), lambda loaded: _claims(path, loaded, node_name))


def _claims(
    path: str, loaded: Iterable[Documents], node_name: str | None
) -> tuple[dict[Identity, Claim], list[Rejection]]:
    rejections: list[Rejection] = []
    claims: dict[Identity, Claim] = {}
    for obj, documents in _each_object(loaded):
        rejections += _duplicate_keys(path, documents, obj)
        identity = _identity(obj)
        item, problems = parse_object(obj, node_name)
        if identity is None:
            rejections += _prefixed(path, problems)
            continue
        description = f"{path}: {describe(obj)}"
        if claims.pop(identity, None) is not None:
            rejections.append(
                Rejection(
                    description,
                    "also defined earlier in the same file; this later one is used",
                    SkipReason.DUPLICATE,
                )
            )
        claims[identity] = Claim(description, item, tuple(_prefixed(path, problems)))
    return claims, rejections


def _duplicate_keys(path: str, documents: Documents, obj: Any) -> list[Rejection]:
    repeated = documents.duplicates_in(obj) if isinstance(obj, Mapping) else []
    if not repeated:
        return []
    keys = ", ".join(sorted(set(map(repr, repeated))))
    return [
        Rejection(
            f"{path}: {describe(obj)}",
            f"duplicate mapping keys {keys}: the last of each is used",
            SkipReason.DUPLICATE,
        )
    ]
