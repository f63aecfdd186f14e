"""Persistent maps and sets behave as dicts and frozensets, and updates leave the old intact."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ipvsproxy.persistent import PersistentMap, PersistentSet

KEYS = st.one_of(st.integers(-50, 300), st.text(max_size=3))
STEPS = st.lists(
    st.tuples(st.dictionaries(KEYS, st.integers()), st.lists(KEYS, max_size=10)), max_size=25
)


@given(st.dictionaries(KEYS, st.integers()), STEPS)
def test_a_map_updated_in_steps_is_the_dict_so_changed_and_each_version_stays(
    start: dict[object, int], steps: list[tuple[dict[object, int], list[object]]]
) -> None:
    versions = [(PersistentMap(start), dict(start))]
    for put, remove in steps:
        current, model = versions[-1]
        expected = {k: v for k, v in model.items() if k not in remove} | put
        versions.append((current.updated(put, remove), expected))
    for found, expected in versions:
        assert found == expected and expected == found
        assert dict(found.items()) == expected
        assert len(found) == len(expected)
        assert sorted(map(repr, found)) == sorted(map(repr, expected))
        assert sorted(found.values()) == sorted(expected.values())
        for key in expected:
            assert key in found and found[key] == expected[key] == found.get(key)
        assert found.get("absent-key", -1) == -1 and "absent-key" not in found


@given(
    st.frozensets(KEYS),
    st.lists(st.tuples(st.frozensets(KEYS, max_size=10), st.frozensets(KEYS)), max_size=25),
)
def test_a_set_updated_in_steps_is_the_frozenset_so_changed_and_each_version_stays(
    start: frozenset[object], steps: list[tuple[frozenset[object], frozenset[object]]]
) -> None:
    versions = [(PersistentSet(start), start)]
    for add, remove in steps:
        current, model = versions[-1]
        versions.append((current.updated(add, remove), (model - remove) | add))
    for found, expected in versions:
        assert found == expected and expected == found
        assert len(found) == len(expected) and frozenset(found) == expected
        assert all(item in found for item in expected)
        assert found | {"new"} == expected | {"new"}
        assert found - expected == frozenset()


def test_an_update_that_changes_nothing_is_the_same_object() -> None:
    mapping = PersistentMap({1: "a"})
    values = PersistentSet([1, 2])
    assert mapping.updated({1: "a"}, [5]) is mapping
    assert values.updated([1], [7]) is values


def test_growing_one_key_at_a_time_keeps_chunks_short() -> None:
    mapping: PersistentMap[int, int] = PersistentMap()
    values: PersistentSet[int] = PersistentSet()
    for number in range(5000):
        mapping = mapping.updated({number: number})
        values = values.updated([number])
    assert mapping == {n: n for n in range(5000)} and values == frozenset(range(5000))
    assert max(map(len, mapping._chunks)) <= 4 * len(mapping._chunks)
    assert max(map(len, values._chunks)) <= 4 * len(values._chunks)


def test_an_update_copies_only_the_chunks_it_touches() -> None:
    before = PersistentMap({n: n for n in range(10_000)})
    after = before.updated({10_001: 1}, [5])
    shared = sum(old is new for old, new in zip(before._chunks, after._chunks, strict=True))
    assert shared == len(before._chunks) - 2
    assert 5 in before and 10_001 not in before
