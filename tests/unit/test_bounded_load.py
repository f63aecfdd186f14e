"""Hostile YAML and JSON: bounded expansion and depth, duplicate keys reported."""

from __future__ import annotations

import json

import pytest

from ipvsproxy.bounded_load import MAX_DEPTH, LoadError, load_documents

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
