"""Immutable maps and sets whose updated copies share everything but what the update touched.

A sync after one change must cost the change, but the desired state holds containers of the
cluster's size (every virtual server, a 10,000-entry ipset, every bound address), and each sync
publishes a new immutable state that the reconciler, the metrics thread and the next sync read.
Copying those containers per sync made one change cost the cluster (a 11,000-entry dict copy
is milliseconds). Here a container is a tuple of chunks, each a dict or frozenset never changed
once published, chosen by the key's hash: an update copies the tuple of pointers and the few
chunks its keys fall in, and shares the rest. About the square root of the size in chunks keeps
both copies short (a 11,000-entry map: 128 chunks of about 86).

Lookups cost one hash and two indexings; iteration walks the chunks, in no promised order.
This module imports nothing of the project.
"""

from __future__ import annotations

from collections.abc import (
    Hashable,
    ItemsView,
    Iterable,
    Iterator,
    KeysView,
    Mapping,
    Set,
    ValuesView,
)
from typing import Any, TypeVar, cast, overload

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
T = TypeVar("T", bound=Hashable)

_MISSING: Any = object()


def _bits_for(size: int) -> int:
    """log2 of the chunk count for ``size`` entries: about sqrt(size) chunks."""
    return (size.bit_length() + 1) // 2


def _outgrown(size: int, bits: int) -> bool:
    # Chunks four times longer than their count: copying one costs more than the tuple.
    return size > 4 << (2 * bits)


class PersistentMap(Mapping[K, V]):
    """An immutable mapping; ``updated`` returns a new one sharing the untouched chunks."""

    __slots__ = ("_chunks", "_len", "_mask")

    def __init__(self, items: Mapping[K, V] | None = None) -> None:
        items = items or {}
        bits = _bits_for(len(items))
        chunks: list[dict[K, V]] = [{} for _ in range(1 << bits)]
        mask = (1 << bits) - 1
        for key, value in items.items():
            chunks[hash(key) & mask][key] = value
        self._chunks: tuple[dict[K, V], ...] = tuple(chunks)
        self._mask = mask
        self._len = len(items)

    def updated(
        self, put: Mapping[K, V] | None = None, remove: Iterable[K] = ()
    ) -> PersistentMap[K, V]:
        """A copy with ``remove``'s keys gone (absent ones ignored), then ``put``'s set."""
        chunks = list(self._chunks)
        mask, length = self._mask, self._len
        copied: set[int] = set()

        def writable(index: int) -> dict[K, V]:
            if index not in copied:
                copied.add(index)
                chunks[index] = dict(chunks[index])
            return chunks[index]

        for key in remove:
            index = hash(key) & mask
            if key in chunks[index]:
                del writable(index)[key]
                length -= 1
        for key, value in (put or {}).items():
            index = hash(key) & mask
            chunk = chunks[index]
            if chunk.get(key, _MISSING) is value:
                continue
            length += key not in chunk
            writable(index)[key] = value
        if not copied:
            return self
        result = PersistentMap.__new__(PersistentMap)
        result._chunks, result._mask, result._len = tuple(chunks), mask, length
        if _outgrown(length, mask.bit_length()):
            return PersistentMap(dict(result.items()))
        return result

    def __getitem__(self, key: K) -> V:
        return self._chunks[hash(key) & self._mask][key]

    @overload
    def get(self, key: K, /) -> V | None: ...
    @overload
    def get(self, key: K, default: V | T, /) -> V | T: ...
    def get(self, key: K, default: Any = None, /) -> Any:
        return self._chunks[hash(key) & self._mask].get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._chunks[hash(key) & self._mask]

    def __iter__(self) -> Iterator[K]:
        for chunk in self._chunks:
            yield from chunk

    def __len__(self) -> int:
        return self._len

    def keys(self) -> KeysView[K]:
        return KeysView(self)

    def items(self) -> ItemsView[K, V]:
        return _Items(self)

    def values(self) -> ValuesView[V]:
        return _Values(self)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        if len(self) != len(other):
            return False
        return all(other.get(key, _MISSING) == value for key, value in self.items())

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PersistentMap({dict(self.items())!r})"


class _Items(ItemsView[K, V]):
    _mapping: PersistentMap[K, V]

    def __iter__(self) -> Iterator[tuple[K, V]]:
        for chunk in self._mapping._chunks:
            yield from chunk.items()


class _Values(ValuesView[V]):
    _mapping: PersistentMap[Any, V]

    def __iter__(self) -> Iterator[V]:
        for chunk in self._mapping._chunks:
            yield from chunk.values()


class PersistentSet(Set[T]):
    """An immutable set; ``updated`` returns a new one sharing the untouched chunks.

    Set algebra (``|``, ``-``, ``&``, comparisons) works on one frozenset of the members, made
    in C, and returns plain frozensets."""

    __slots__ = ("_chunks", "_len", "_mask")

    def __init__(self, items: Iterable[T] = ()) -> None:
        members = items if isinstance(items, Set) else frozenset(items)
        bits = _bits_for(len(members))
        buckets: list[set[T]] = [set() for _ in range(1 << bits)]
        mask = (1 << bits) - 1
        for item in members:
            buckets[hash(item) & mask].add(item)
        self._chunks: tuple[frozenset[T], ...] = tuple(map(frozenset, buckets))
        self._mask = mask
        self._len = len(members)

    def updated(self, add: Iterable[T] = (), remove: Iterable[T] = ()) -> PersistentSet[T]:
        """A copy with ``remove``'s items gone, then ``add``'s in (present ones ignored)."""
        mask = self._mask
        removed: dict[int, set[T]] = {}
        added: dict[int, set[T]] = {}
        for item in remove:
            index = hash(item) & mask
            if item in self._chunks[index]:
                removed.setdefault(index, set()).add(item)
        for item in add:
            index = hash(item) & mask
            if item not in self._chunks[index] or item in removed.get(index, ()):
                added.setdefault(index, set()).add(item)
        if not removed and not added:
            return self
        chunks = list(self._chunks)
        length = self._len
        for index in removed.keys() | added.keys():
            old = chunks[index]
            new = old.difference(removed.get(index, ())).union(added.get(index, ()))
            length += len(new) - len(old)
            chunks[index] = new
        result = PersistentSet.__new__(PersistentSet)
        result._chunks, result._mask, result._len = tuple(chunks), mask, length
        if _outgrown(length, mask.bit_length()):
            return PersistentSet(frozenset(result))
        return cast("PersistentSet[T]", result)

    def __contains__(self, item: object) -> bool:
        return item in self._chunks[hash(item) & self._mask]

    def __iter__(self) -> Iterator[T]:
        for chunk in self._chunks:
            yield from chunk

    def __len__(self) -> int:
        return self._len

    def frozen(self) -> frozenset[T]:
        """The members as one frozenset: made in C from the chunks' stored hashes, so whole-set
        algebra (a full sync's) costs no Python call per member."""
        return frozenset().union(*self._chunks)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Set):
            return NotImplemented
        return len(self) == len(other) and self.frozen() == frozen(other)

    def __le__(self, other: Set[Any]) -> bool:
        return self.frozen() <= frozen(other)

    def __ge__(self, other: Set[Any]) -> bool:
        return self.frozen() >= frozen(other)

    def __lt__(self, other: Set[Any]) -> bool:
        return self.frozen() < frozen(other)

    def __gt__(self, other: Set[Any]) -> bool:
        return self.frozen() > frozen(other)

    def __sub__(self, other: Set[Any]) -> frozenset[T]:
        return self.frozen() - frozen(other)

    def __rsub__(self, other: Set[Any]) -> frozenset[Any]:
        return frozen(other) - self.frozen()

    def __or__(self, other: Set[Any]) -> frozenset[Any]:
        return self.frozen() | frozen(other)

    __ror__ = __or__

    def __and__(self, other: Set[Any]) -> frozenset[T]:
        return self.frozen() & frozen(other)

    __rand__ = __and__

    def __xor__(self, other: Set[Any]) -> frozenset[Any]:
        return self.frozen() ^ frozen(other)

    __rxor__ = __xor__

    def isdisjoint(self, other: Iterable[Any]) -> bool:
        return self.frozen().isdisjoint(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PersistentSet({set(self)!r})"


# CPython (3.10 and later) makes a new empty frozenset, 216 bytes, at every frozenset() call.
_EMPTY: frozenset[Any] = frozenset()


def frozen_shared(items: Iterable[T]) -> frozenset[T]:
    """``items`` as a frozenset, and the one shared empty frozenset when there are none: a
    translation keeps several per service, most of them empty."""
    made = frozenset(items)
    return made if made else _EMPTY


def frozen(items: Set[T]) -> frozenset[T]:
    """``items`` as a frozenset, without a Python call per member where it can."""
    if isinstance(items, frozenset):
        return items
    if isinstance(items, PersistentSet):
        return items.frozen()
    return frozenset(items)
