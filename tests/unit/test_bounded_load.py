"""Hostile YAML and JSON: bounded expansion and depth, duplicate keys reported."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ipvsproxy.bounded_load import MAX_DEPTH, Documents, LoadError, load_documents, load_each
from ipvsproxy.cluster.manifest_file import flatten

# The "billion laughs" shape in 354 bytes: nine levels of ten aliases each (10^9 leaves).
LAUGHS = "a: &a [lol]\n" + "".join(
    f"{name}: &{name} [{','.join(['*' + below] * 10)}]\n"
    for below, name in zip("abcdefghi", "bcdefghij", strict=True)
)


def test_alias_expansion_is_refused_in_one_line() -> None:
    assert len(LAUGHS) < 400
    with pytest.raises(LoadError, match="aliases expand the document far beyond its own size"):
        load_documents(LAUGHS)


def test_a_few_aliases_are_fine() -> None:
    text = "base: &labels {app: web}\nitems:\n- labels: *labels\n- labels: *labels\n"
    [document] = load_documents(text).documents
    assert document["items"][1]["labels"] == {"app": "web"}


@pytest.mark.parametrize(
    "text",
    [
        "".join(" " * level + "a:\n" for level in range(600)),
        "[" * 600 + "]" * 600,
        "[" * 5000 + "]" * 5000,
        json.dumps(json.loads("[" * 600 + "]" * 600)),
        '{"a": ' * 5000 + "1" + "}" * 5000,
        "- " * 600 + "x",
    ],
    ids=["yaml-maps", "yaml-flow", "yaml-flow-5000", "json-600", "json-5000", "yaml-seqs"],
)
def test_too_deep_is_one_line(text: str) -> None:
    with pytest.raises(LoadError) as raised:
        load_documents(text)
    assert f"nested deeper than {MAX_DEPTH} levels" in str(raised.value)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("innermost", ["[]", '{"a": 1}'])
def test_nesting_is_refused_one_level_past_the_bound_and_not_at_it(innermost: str) -> None:
    def nested(levels: int) -> str:
        return "[" * (levels - 1) + innermost + "]" * (levels - 1)

    assert load_documents(nested(MAX_DEPTH)).documents
    with pytest.raises(LoadError, match="nested deeper"):
        load_documents(nested(MAX_DEPTH + 1))


def test_duplicate_keys_are_recorded_for_yaml_and_json() -> None:
    yaml_text = "kind: Service\nmetadata: {name: a, name: b}\nspec: {}\nspec: {ports: []}\n"
    loaded = load_documents(yaml_text)
    [document] = loaded.documents
    assert document["metadata"] == {"name": "b"}
    assert sorted(loaded.duplicates_in(document)) == ["name", "spec"]
    json_text = '{"kind": "Service", "metadata": {"name": "a", "name": "b"}}'
    loaded = load_documents(json_text)
    assert loaded.duplicates_in(loaded.documents[0]) == ["name"]


def test_timestamps_stay_strings_as_in_kubernetes() -> None:
    [document] = load_documents("created: 2024-01-01T00:00:00Z\n").documents
    assert document == {"created": "2024-01-01T00:00:00Z"}


def test_yaml_errors_name_the_line() -> None:
    with pytest.raises(LoadError, match=r"^not valid YAML at line 3: mapping values"):
        load_documents("a: 1\nb: 2\nc: d: e\n")


def _objects_and_duplicates(loaded: Iterable[Documents]) -> list[tuple[Any, list[str]]]:
    return [
        (obj, sorted(documents.duplicates_in(obj)) if isinstance(obj, dict) else [])
        for documents in loaded
        for document in documents.documents
        for obj in flatten(document)
    ]


def _outcome(load: Any) -> object:
    try:
        return load()
    except LoadError as error:
        return ("LoadError", str(error))


_KEYS = st.sampled_from(["a", "b", "kind", "items"])
_SCALARS = (
    st.none() | st.booleans() | st.integers() | st.text(max_size=3) | st.floats(allow_nan=False)
)
_WHITESPACE = st.sampled_from(["", " ", "\n", "\t ", "\r\n"])


def _mapping(pairs: list[tuple[str, str]]) -> str:
    # Written by hand, not by json.dumps: a key may be given twice.
    return "{" + ",".join(f"{json.dumps(key)}:{value}" for key, value in pairs) + "}"


_VALUES = st.recursive(
    _SCALARS.map(json.dumps),
    lambda inner: (
        st.lists(inner, max_size=3).map(lambda items: f"[{', '.join(items)}]")
        | st.lists(st.tuples(_KEYS, inner), max_size=3).map(_mapping)
    ),
    max_leaves=12,
)
_ARRAYS = st.lists(_VALUES, max_size=4).map(lambda items: f"[{', '.join(items)}]")


@st.composite
def _top_level(draw: st.DrawFn) -> list[tuple[str, str]]:
    """A List's keys in any order; perhaps one more that spoils it (a second kind or items,
    a kind that is no List)."""
    pairs = [("kind", '"List"'), ("items", draw(_ARRAYS))]
    others = st.tuples(st.sampled_from(["apiVersion", "metadata"]), _VALUES)
    pairs += draw(st.lists(others, max_size=2))
    spoilers = st.tuples(
        st.sampled_from(["kind", "items"]), st.sampled_from(['"Service"', "null"]) | _VALUES
    )
    pairs += draw(st.lists(spoilers, max_size=1))
    return draw(st.permutations(pairs))


@given(_top_level(), _WHITESPACE, _WHITESPACE, st.integers(min_value=0), st.booleans())
def test_a_list_one_item_at_a_time_is_what_the_whole_text_loads_to(
    pairs: list[tuple[str, str]], before: str, after: str, cut: int, truncated: bool
) -> None:
    # Key orders, a kind that is no List or comes after the items, keys given twice at the
    # top and inside items, items that are no array, texts cut short.
    text = before + _mapping(pairs) + after
    if truncated:
        text = text[: cut % (len(text) + 1)]
    streamed = _outcome(lambda: load_each(text, _objects_and_duplicates))
    whole = _outcome(lambda: _objects_and_duplicates([load_documents(text)]))
    assert streamed == whole


def test_a_lists_items_come_one_at_a_time_each_with_its_own_duplicate_keys() -> None:
    text = '{"kind": "List", "items": [{"a": 1, "a": 2}, [{"b": 1}]], "apiVersion": "v1"}'
    handed: list[tuple[int, list[Any]]] = []

    def consume(loaded: Iterable[Documents]) -> int:
        for documents in loaded:
            [document] = documents.documents
            handed.append((len(documents.duplicate_keys), document))
        return len(handed)

    assert load_each(text, consume) == 2
    assert handed == [(1, {"a": 2}), (0, [{"b": 1}])]


def test_a_text_that_turns_out_no_list_is_handed_over_again_whole() -> None:
    text = '{"items": [{"kind": "Service"}], "kind": "Widget"}'
    calls: list[list[Any]] = []

    def consume(loaded: Iterable[Documents]) -> list[Any]:
        calls.append([])
        for documents in loaded:
            calls[-1] += documents.documents
        return calls[-1]

    assert load_each(text, consume) == [{"items": [{"kind": "Service"}], "kind": "Widget"}]
    assert calls[0] == [{"kind": "Service"}]


@pytest.mark.parametrize(("levels", "refused"), [(MAX_DEPTH - 2, False), (MAX_DEPTH - 1, True)])
def test_a_lists_item_is_nested_within_the_bound_of_the_whole_text(
    levels: int, refused: bool
) -> None:
    # The List and its items array are the first two levels of the document.
    item = '{"a": ' * (levels - 1) + "{}" + "}" * (levels - 1)
    text = f'{{"kind": "List", "items": [{item}]}}'
    if refused:
        with pytest.raises(LoadError, match="nested deeper"):
            load_each(text, _objects_and_duplicates)
        with pytest.raises(LoadError, match="nested deeper"):
            load_documents(text)
    else:
        [(obj, _)] = load_each(text, _objects_and_duplicates)
        assert obj == json.loads(item)
