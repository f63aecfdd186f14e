"""A pytest plugin: each of several lab boots runs its own share of the collected tests.

``IPVSPROXY_LAB_SHARD=INDEX/COUNT`` keeps every COUNT-th test from INDEX on, in collection
order, so the shares are the same on every run and each file's tests spread over the boots.
"""

from __future__ import annotations

import os
from typing import TypeVar

import pytest

from tests.lab.boot import SHARD_VARIABLE

T = TypeVar("T")


def parse_shard(text: str) -> tuple[int, int]:
    index, _, count = text.partition("/")
    return int(index), int(count)


def share(items: list[T], index: int, count: int) -> list[T]:
    return items[index::count]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    shard = os.environ.get(SHARD_VARIABLE)
    if not shard:
        return
    kept = share(items, *parse_shard(shard))
    kept_ids = {id(item) for item in kept}
    config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept_ids])
    items[:] = kept
