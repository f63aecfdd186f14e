"""The lab runner's own logic: shares of the tests per boot, and one status from several."""

from __future__ import annotations

import pytest

from tests.lab.boot import merged_status
from tests.lab.shard import parse_shard, share


def test_shares_cover_every_test_once_in_order() -> None:
    tests = list(range(7))
    shares = [share(tests, index, 3) for index in range(3)]
    assert shares == [[0, 3, 6], [1, 4], [2, 5]]
    assert sorted(test for part in shares for test in part) == tests
    assert parse_shard("1/3") == (1, 3)


@pytest.mark.parametrize(
    ("statuses", "merged"),
    [
        ([0, 0], 0),
        ([0, 5], 0),  # one boot's share was empty
        ([5, 5], 5),
        ([1, 0], 1),
        ([5, 1], 1),
        ([1, 3], 3),  # a kernel that stopped early outranks failed tests
    ],
)
def test_statuses_merge_as_one_pytest_run_would_report(statuses: list[int], merged: int) -> None:
    assert merged_status(statuses) == merged
