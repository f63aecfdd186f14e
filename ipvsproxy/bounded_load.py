"""YAML and JSON documents read within bounds, for manifests and the config file alike.

Every byte read here is written by someone we do not trust, so reading and loading are bounded:

* only regular files are read, opened without blocking and checked on the opened descriptor
  (a FIFO would block ``read`` forever, ``/dev/zero`` would fill the memory), and no more than
  a given size (a big file costs tens of times its size once parsed);
* aliases may not expand the document beyond the size of its own text (the "billion laughs"
  shape grows a few hundred bytes into gigabytes when walked);
* nesting deeper than ``MAX_DEPTH`` is refused (no Kubernetes object we read comes close);
* duplicate mapping keys are reported rather than silently won by the last one.

JSON goes through the json module and YAML through libyaml (``yaml_documents``).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

MAX_DEPTH = 100
# Containers a document may hold beyond one per byte of its text, before aliases count as
# an expansion attack: a plain document has fewer containers than bytes.
EXPANSION_ALLOWANCE = 1000


class LoadError(ValueError):
    """The text is not a usable document; the message is one line, without the file name."""


_FILE_TYPES = {
    stat.S_IFDIR: "a folder",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def not_regular(mode: int) -> str | None:
    """Why a file of this ``st_mode`` is not read (one line), or None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return (
        f"not a regular file but {_FILE_TYPES.get(stat.S_IFMT(mode), 'a special file')}; not read"
    )


def read_bounded(
    path: str | os.PathLike[str], max_bytes: int, bound: str
) -> tuple[bytes, os.stat_result]:
    """The bytes of the regular file at ``path`` and its stat, as opened; at most ``max_bytes``.

    Never blocks: the file is opened with O_NONBLOCK (a FIFO without a writer opens at once)
    and its type checked with fstat on that descriptor, so a FIFO or device put in its place
    after any earlier stat is refused all the same. A file that is not regular, or larger than
    ``max_bytes`` (``bound`` says what sets it), raises LoadError; OSError passes through.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        opened = os.fstat(fd)
        refusal = not_regular(opened.st_mode)
        if refusal is not None:
            raise LoadError(refusal)
        if opened.st_size > max_bytes:
            raise LoadError(_too_big(f"{opened.st_size} bytes", max_bytes, bound))
        data = _read_at_most(fd, max_bytes + 1, opened.st_size)
    finally:
        os.close(fd)
    if len(data) > max_bytes:  # it grew after fstat
        raise LoadError(_too_big(f"more than {max_bytes} bytes", max_bytes, bound))
    return data, opened


def _read_at_most(fd: int, limit: int, expected: int) -> bytes:
    """Up to ``limit`` bytes; a file of the ``expected`` size that does not grow in one read,
    so its bytes are written once (chunks and their join touched twice the file's pages, each
    a page fault, slow in the lab)."""
    chunks: list[bytes] = []
    size = expected + 1
    while limit > 0:
        chunk = os.read(fd, min(limit, size))
        if not chunk:
            break
        chunks.append(chunk)
        limit -= len(chunk)
        size = 1 << 20
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _too_big(size: str, max_bytes: int, bound: str) -> str:
    return f"{size}, over the bound of {max_bytes} bytes {bound}; not read"


@dataclass(slots=True)
class Documents:
    """The documents of one text, with the duplicate keys found in its mappings.

    ``duplicate_keys`` maps ``id()`` of a loaded mapping to the keys it had more than once
    (the last value of each is the one kept, as Kubernetes' decoder keeps it).
    """

    documents: list[Any]
    duplicate_keys: dict[int, list[str]] = field(default_factory=dict)

    def duplicates_in(self, obj: Any) -> list[str]:
        """The duplicated keys anywhere inside ``obj``, one of the loaded documents' parts."""
        if not self.duplicate_keys:
            return []
        return [
            key
            for container in _containers(obj)
            for key in self.duplicate_keys.get(id(container), ())
        ]


def _load_json(text: str) -> Documents | None:
    """The JSON document, or None when the text is not JSON (it may still be YAML)."""
    duplicate_keys: dict[int, list[str]] = {}

    def pairs_to_dict(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        data = dict(pairs)
        if len(data) != len(pairs):
            keys = [key for key, _ in pairs]
            duplicate_keys[id(data)] = sorted({key for key in keys if keys.count(key) > 1})
        return data

    try:
        document = json.loads(text, object_pairs_hook=pairs_to_dict)
    except RecursionError:
        raise LoadError(f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError:
        return None
    return Documents([] if document is None else [document], duplicate_keys)


def _containers(root: Any) -> Iterator[Any]:
    """Every dict and list inside ``root``, itself included, depth first, without recursion."""
    stack = [root]
    while stack:
        current = stack.pop()
        yield current
        values = current.values() if type(current) is dict else current
        stack.extend(v for v in values if type(v) is dict or type(v) is list)


def _check_shape(documents: list[Any], budget: int) -> None:
    """Refuse nesting past MAX_DEPTH and alias expansion past ``budget`` containers.

    Level by level, each level's containers gathered in one comprehension per container:
    half the time of a walk that carries each container's depth (a tenth of loading a
    manifest). The budget is checked as each container's children are gathered, so a level
    of aliases never grows past it by more than one container's children."""
    level = [document for document in documents if type(document) in (dict, list)]
    seen = len(level)
    depth = 1
    while level:
        if depth > MAX_DEPTH:
            raise LoadError(f"nested deeper than {MAX_DEPTH} levels")
        below: list[Any] = []
        for current in level:
            values = current.values() if type(current) is dict else current
            below.extend([v for v in values if type(v) is dict or type(v) is list])
            if seen + len(below) > budget:
                raise LoadError(
                    "YAML aliases expand the document far beyond its own size; refused "
                    "(expand the aliases in the file if they are meant)"
                )
        seen += len(below)
        level = below
        depth += 1


def load_documents(text: str) -> Documents:
    """Every non-empty document of a YAML or JSON text; raises LoadError (one line)."""
    loaded = _load_json(text) if text.lstrip()[:1] in ("{", "[") else None
    if loaded is None:
        # Imported here: PyYAML is a tenth of the command line's start in the lab, and a JSON
        # manifest never needs it.
        from ipvsproxy.yaml_documents import load_yaml  # noqa: PLC0415

        loaded = load_yaml(text)
    _check_shape(loaded.documents, len(text) + EXPANSION_ALLOWANCE)
    return loaded
