"""JSON text in chunks, with long arrays made a batch of items at a time.

``json.JSONEncoder(indent=2).iterencode`` writes in chunks but needs every value whole first:
a first sync of 10,000 services printed with ``--output json`` held each of its 120,000
operations as a dict of dicts twice (the plan's and the applied ones) before the first byte,
and peaked at 362 MB in the lab where the same sync printed as text peaked at 126 MB. An
``EachEncoded`` array keeps its items as they are and makes their JSON values a thousand at a
time, as they are written. The text is the same as ``json.dumps(..., indent=2)`` of the
document with each ``EachEncoded`` made a list.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")

_INDENT = "  "
_ENCODER = json.JSONEncoder(indent=len(_INDENT))
# Items made and encoded together. Each encoding with an indent builds the encoder's nested
# functions anew, a reference cycle that waits for the cyclic collector, which sync --once
# keeps paused: one encoding per item held 220 MB more at 10,000 services, not less.
ITEMS_AT_ONCE = 1000


@dataclass(frozen=True, slots=True)
class EachEncoded(Generic[T]):
    """A JSON array of ``value(item)`` for each of ``items``, each made when it is written."""

    items: Sequence[T]
    value: Callable[[T], Any]


def _holds_each_encoded(value: Mapping[str, Any]) -> bool:
    return any(
        isinstance(item, EachEncoded) or (isinstance(item, Mapping) and _holds_each_encoded(item))
        for item in value.values()
    )


def _whole(value: Any, newline: str) -> str:
    # A JSON string never holds a raw line break, so each one in the text starts a line.
    return _ENCODER.encode(value).replace("\n", newline)


def _array(value: EachEncoded[Any], newline: str) -> Iterator[str]:
    items = value.items
    if not items:
        yield "[]"
        return
    separator = "["
    for start in range(0, len(items), ITEMS_AT_ONCE):
        made = [value.value(item) for item in items[start : start + ITEMS_AT_ONCE]]
        # "[\n  a,\n  b\n]": the items without the brackets, one level further in.
        yield separator + _ENCODER.encode(made)[1:-2].replace("\n", newline)
        separator = ","
    yield newline + "]"


def _chunks(value: Any, level: int) -> Iterator[str]:
    newline = "\n" + _INDENT * level
    inner = newline + _INDENT
    if isinstance(value, EachEncoded):
        yield from _array(value, newline)
    elif isinstance(value, Mapping) and value and _holds_each_encoded(value):
        opening = "{"
        for key, item in value.items():
            yield f"{opening}{inner}{json.dumps(key)}: "
            yield from _chunks(item, level + 1)
            opening = ","
        yield newline + "}"
    else:
        yield _whole(value, newline)


def json_chunks(document: Mapping[str, Any]) -> Iterator[str]:
    """``document`` as ``json.dumps(document, indent=2)`` writes it, in chunks."""
    return _chunks(document, 0)
