"""A pytest plugin: each of several lab boots runs its own share of the collected tests.

``IPVSPROXY_LAB_SHARD=INDEX/COUNT`` keeps boot INDEX's share. Tests are dealt, heaviest first,
each to the boot with the least weight so far (a test weighs 1, or what its
``lab_weight(N)`` marker says: about N ordinary tests' time), so one long scenario does not
make its boot the last to finish. Collection order breaks ties, so the shares are the same on
every boot and every run, and equal weights deal round the boots in order.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TypeVar

import pytest

from tests.lab.boot import SHARD_VARIABLE

T = TypeVar("T")

WEIGHT_MARKER = "lab_weight"


def parse_shard(text: str) -> tuple[int, int]:
    index, _, count = text.partition("/")
    return int(index), int(count)


def share(items: Sequence[T], weights: Sequence[float], index: int, count: int) -> list[T]:
    """Boot ``index``'s items of ``count`` boots, in their collection order."""
    loads = [0.0] * count
    owner = [0] * len(items)
    for position in sorted(range(len(items)), key=lambda p: -weights[p]):
        lightest = loads.index(min(loads))
        owner[position] = lightest
        loads[lightest] += weights[position]
    return [item for position, item in enumerate(items) if owner[position] == index]


def weight(item: pytest.Item) -> float:
    marker = item.get_closest_marker(WEIGHT_MARKER)
    return float(marker.args[0]) if marker is not None else 1.0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    shard = os.environ.get(SHARD_VARIABLE)
    if not shard:
        return
    kept = share(items, [weight(item) for item in items], *parse_shard(shard))
    kept_ids = {id(item) for item in kept}
    config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept_ids])
    items[:] = kept
