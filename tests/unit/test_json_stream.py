"""json_chunks: the text json.dumps(indent=2) writes, with EachEncoded arrays made lazily."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ipvsproxy.json_stream import ITEMS_AT_ONCE, EachEncoded, json_chunks

_SCALARS = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
_VALUES = st.recursive(
    _SCALARS,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=12,
)


def _as_list(value: EachEncoded[Any]) -> list[Any]:
    return [value.value(item) for item in value.items]


def _plain(value: Any) -> Any:
    """The document json.dumps would be given: each EachEncoded made a list."""
    if isinstance(value, EachEncoded):
        return [_plain(item) for item in _as_list(value)]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


def _wrapped(draw: st.DrawFn, depth: int) -> Any:
    """A document of plain values, EachEncoded arrays and mappings that hold either."""
    keys = draw(st.lists(st.text(max_size=5), unique=True, max_size=4))
    document: dict[str, Any] = {}
    for key in keys:
        kind = draw(st.sampled_from(["plain", "each", "nested"] if depth < 3 else ["plain"]))
        if kind == "each":
            items = draw(st.lists(_VALUES, max_size=4))
            document[key] = EachEncoded(items, lambda item: {"item": item, "more": [item]})
        elif kind == "nested":
            document[key] = _wrapped(draw, depth + 1)
        else:
            document[key] = draw(_VALUES)
    return document


@st.composite
def _documents(draw: st.DrawFn) -> dict[str, Any]:
    document: dict[str, Any] = _wrapped(draw, 0)
    return document


@given(_documents())
def test_the_text_is_what_json_dumps_writes(document: dict[str, Any]) -> None:
    assert "".join(json_chunks(document)) == json.dumps(_plain(document), indent=2)


def test_an_empty_array_and_an_empty_document() -> None:
    assert "".join(json_chunks({"ops": EachEncoded([], str)})) == '{\n  "ops": []\n}'
    assert "".join(json_chunks({})) == "{}"


def test_items_are_made_a_batch_at_a_time_as_they_are_written() -> None:
    made: list[int] = []

    def value(item: int) -> dict[str, int]:
        made.append(item)
        return {"n": item}

    count = 2 * ITEMS_AT_ONCE + 7
    chunks = json_chunks({"first": 1, "ops": EachEncoded(range(count), value), "last": 2})
    text = ""
    while '"n": 0' not in text:
        text += next(chunks)
    assert made == list(range(ITEMS_AT_ONCE))
    text += "".join(chunks)
    assert made == list(range(count))
    assert json.loads(text)["ops"][count - 1] == {"n": count - 1}
