"""YAML and JSON documents read within bounds, for manifests and the config file alike.

Every byte read here is written by someone we do not trust, so reading and loading are bounded:

* only regular files are read, opened without blocking and checked on the opened descriptor
  (a FIFO would block ``read`` forever, ``/dev/zero`` would fill the memory), and no more than
  a given size (a big file costs tens of times its size once parsed);
* aliases may not expand the document beyond the size of its own text (the "billion laughs"
  shape grows a few hundred bytes into gigabytes when walked);
* nesting deeper than ``MAX_DEPTH`` is refused (no Kubernetes object we read comes close);
* duplicate mapping keys are reported rather than silently won by the last one.

JSON goes through the json module and YAML through libyaml (``yaml_documents``). A JSON
``kind: List`` (what ``kubectl get -o json`` writes) is decoded one item at a time
(``load_each``): its items as Python objects are eight times its text, and only one of them
is held at once.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

MAX_DEPTH = 100
# Containers a document may hold beyond one per byte of its text, before aliases count as
# an expansion attack: a plain document has fewer containers than bytes.
EXPANSION_ALLOWANCE = 1000


_JSON_WHITESPACE = re.compile(r"[ \t\n\r]*")

T = TypeVar("T")


class LoadError(ValueError):
    """The text is not a usable document; the message is one line, without the file name."""


class _NotAList(Exception):
    """The text turned out not to be a JSON ``kind: List``: it is loaded whole instead.

    Not a ValueError, so that nothing that handles a bad document catches it on its way out
    of a consumer."""


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


def _json_decoder() -> tuple[json.JSONDecoder, dict[int, list[str]]]:
    """A decoder, and the duplicate keys of the mappings it decodes by ``id()``."""
    duplicate_keys: dict[int, list[str]] = {}

    def pairs_to_dict(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        data = dict(pairs)
        if len(data) != len(pairs):
            keys = [key for key, _ in pairs]
            duplicate_keys[id(data)] = sorted({key for key in keys if keys.count(key) > 1})
        return data

    return json.JSONDecoder(object_pairs_hook=pairs_to_dict), duplicate_keys


def _load_json(text: str) -> Documents | None:
    """The JSON document, or None when the text is not JSON (it may still be YAML)."""
    decoder, duplicate_keys = _json_decoder()
    try:
        document = decoder.decode(text)
    except RecursionError:
        raise LoadError(f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError:
        return None
    return Documents([] if document is None else [document], duplicate_keys)


def _after_whitespace(text: str, index: int) -> int:
    match = _JSON_WHITESPACE.match(text, index)
    assert match is not None  # it matches the empty string too
    return match.end()


def _decode_at(
    decoding: tuple[json.JSONDecoder, dict[int, list[str]]], text: str, index: int, depth: int
) -> tuple[Documents, int]:
    """The JSON value after whitespace at ``index`` (at ``depth`` in its document, its shape
    checked) and the index past it; _NotAList when there is none. ``decoding`` is one text's
    _json_decoder: its duplicate keys are taken into the value's Documents, so that an id
    freed with an earlier value is never read as this one's."""
    decoder, duplicate_keys = decoding
    try:
        value, end = decoder.raw_decode(text, _after_whitespace(text, index))
    except RecursionError:
        raise LoadError(f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError:
        raise _NotAList from None
    _check_shape([value], len(text) + EXPANSION_ALLOWANCE, depth)
    found = dict(duplicate_keys)
    duplicate_keys.clear()
    return Documents([value], found), end


def _expect(text: str, index: int, characters: str) -> tuple[str, int]:
    """The character after whitespace at ``index``, one of ``characters``, and the index past
    it; _NotAList for any other."""
    index = _after_whitespace(text, index)
    found = text[index : index + 1]
    if not found or found not in characters:
        raise _NotAList
    return found, index + 1


def _list_items(text: str) -> Iterator[Documents]:
    """Each item of the JSON ``kind: List`` object that is the whole text, decoded when asked
    for, each with the duplicate keys of its own mappings.

    Raises _NotAList, after some items perhaps, when the text is anything else: not JSON, a
    top-level key given twice (the last would win), no ``kind: List``, ``items`` no array."""
    _, index = _expect(text, 0, "{")
    decoding = _json_decoder()
    keys: set[str] = set()
    kind: Any = None
    separator = ","
    while separator == ",":
        key, index = _decode_at(decoding, text, index, 2)
        [name] = key.documents
        if type(name) is not str or name in keys:
            raise _NotAList
        keys.add(name)
        _, index = _expect(text, index, ":")
        if name == "items":
            index = yield from _array_items(decoding, text, index)
        else:
            value, index = _decode_at(decoding, text, index, 2)
            if name == "kind":
                kind = value.documents[0]
        separator, index = _expect(text, index, ",}")
    if kind != "List" or "items" not in keys or _after_whitespace(text, index) != len(text):
        raise _NotAList


def _array_items(
    decoding: tuple[json.JSONDecoder, dict[int, list[str]]], text: str, index: int
) -> Generator[Documents, None, int]:
    """The items of the JSON array at ``index``, one at a time; returns the index past it."""
    _, index = _expect(text, index, "[")
    index = _after_whitespace(text, index)
    if text[index : index + 1] == "]":
        return index + 1
    separator = ","
    while separator == ",":
        item, index = _decode_at(decoding, text, index, 3)
        yield item
        separator, index = _expect(text, index, ",]")
    return index


def _containers(root: Any) -> Iterator[Any]:
    """Every dict and list inside ``root``, itself included, depth first, without recursion."""
    stack = [root]
    while stack:
        current = stack.pop()
        yield current
        values = current.values() if type(current) is dict else current
        stack.extend(v for v in values if type(v) is dict or type(v) is list)


def _check_shape(documents: list[Any], budget: int, depth: int = 1) -> None:
    """Refuse nesting past MAX_DEPTH and alias expansion past ``budget`` containers; the
    documents are at ``depth`` (a List's items are at 3).

    Level by level, each level's containers gathered in one comprehension per container:
    half the time of a walk that carries each container's depth (a tenth of loading a
    manifest). The budget is checked as each container's children are gathered, so a level
    of aliases never grows past it by more than one container's children."""
    level = [document for document in documents if type(document) in (dict, list)]
    seen = len(level)
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


def load_each(text: str, consume: Callable[[Iterable[Documents]], T]) -> T:
    """What ``consume`` makes of the text's documents, handed to it one by one.

    A JSON ``kind: List`` comes one item at a time, each item a Documents of its own, so that
    ``consume`` can keep what it makes of an item and drop the item. Any other text comes as
    its one Documents. A text that turns out to be no List (at its first character, or after
    its items: ``kind`` may come after them) is given to ``consume`` again, whole:
    ``consume`` must keep nothing of a call but what it returns. Raises LoadError (one
    line) as load_documents.
    """
    try:
        return consume(_list_items(text))
    except _NotAList:
        return consume([load_documents(text)])
