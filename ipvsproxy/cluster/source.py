"""The ``--source PATH`` reader: manifests as users keep them, turned into a ClusterSnapshot.

Accepts YAML or JSON, several documents per file, ``kind: List`` (what
``kubectl get services,endpointslices,nodes -A -o yaml`` prints) and folders of such files.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from ipvsproxy.cluster.parse import snapshot_from_objects
from ipvsproxy.model import ClusterSnapshot, Rejection

MANIFEST_SUFFIXES = frozenset({".yaml", ".yml", ".json"})


class SourceError(Exception):
    """A source file or folder could not be read or parsed; the message is one line."""


def _documents(path: Path) -> list[Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise SourceError(f"{path}: cannot read: {error}") from error
    try:
        # JSON is YAML, so one loader serves both.
        return [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        problem = getattr(error, "problem", None) or type(error).__name__
        raise SourceError(f"{path}: not valid YAML or JSON{line}: {problem}") from error


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


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in MANIFEST_SUFFIXES)
    if not path.exists():
        raise SourceError(f"{path}: no such file or folder")
    return [path]


def load_objects(path: Path) -> list[Any]:
    """Every object in the file or folder, with List wrappers unpacked."""
    return [obj for file in _files(path) for doc in _documents(file) for obj in _flatten(doc)]


def load_snapshot(path: Path, node_name: str | None) -> tuple[ClusterSnapshot, list[Rejection]]:
    return snapshot_from_objects(load_objects(path), node_name)
