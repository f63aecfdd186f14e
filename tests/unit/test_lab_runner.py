"""The lab runner's own logic: shares of the tests per boot, one status from several, the
host's map limit, and where the lab's memory lives."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lab.boot import ensure_map_count, memory_bytes, memory_folder, merged_status
from tests.lab.shard import parse_shard, share


def test_shares_cover_every_test_once_in_order() -> None:
    tests = list(range(7))
    shares = [share(tests, [1] * 7, index, 3) for index in range(3)]
    assert shares == [[0, 3, 6], [1, 4], [2, 5]]
    assert sorted(test for part in shares for test in part) == tests
    assert parse_shard("1/3") == (1, 3)


def test_a_heavy_test_gets_a_boot_whose_other_tests_make_up_the_difference() -> None:
    tests = list(range(8))
    weights = [1, 1, 1, 5, 1, 1, 1, 1]
    shares = [share(tests, weights, index, 2) for index in range(2)]
    assert shares == [[3, 6], [0, 1, 2, 4, 5, 7]]
    loads = [sum(weights[test] for test in part) for part in shares]
    assert loads == [6, 6]


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


def test_the_hosts_map_limit_is_raised_for_big_guest_processes(tmp_path: Path) -> None:
    setting = tmp_path / "max_map_count"
    setting.write_text("65530\n")
    ensure_map_count(setting, 1_000_000)
    assert int(setting.read_text()) == 1_000_000


def test_a_higher_map_limit_is_left_as_it_is(tmp_path: Path) -> None:
    setting = tmp_path / "max_map_count"
    setting.write_text("2000000\n")
    ensure_map_count(setting, 1_000_000)
    assert setting.read_text() == "2000000\n"


@pytest.mark.parametrize(
    ("setting", "size"),
    [("1G", 2**30), ("3g", 3 * 2**30), ("512M", 2**29), ("65536K", 2**26), ("4096", 4096)],
)
def test_the_lab_memory_setting_reads_as_uml_reads_it(setting: str, size: int) -> None:
    assert memory_bytes(setting) == size


def test_the_lab_memory_goes_to_a_tmpfs_with_room_for_it(tmp_path: Path) -> None:
    scratch, tmpfs, mounts = tmp_path / "scratch", tmp_path / "shm", tmp_path / "mounts"
    scratch.mkdir()
    tmpfs.mkdir()
    mounts.write_text(f"/dev/vda / ext4 rw 0 0\ntmpfs {tmpfs} tmpfs rw 0 0\n")

    folder = memory_folder(scratch, "1K", tmpfs, mounts)

    assert folder.parent == tmpfs
    assert folder.is_dir()


def test_the_lab_memory_stays_in_scratch_without_a_tmpfs_with_room_for_it(tmp_path: Path) -> None:
    scratch, tmpfs, mounts = tmp_path / "scratch", tmp_path / "shm", tmp_path / "mounts"
    scratch.mkdir()
    tmpfs.mkdir()
    mounts.write_text(f"/dev/vda {tmpfs} ext4 rw 0 0\n")
    assert memory_folder(scratch, "1K", tmpfs, mounts) == scratch / "uml"

    scratch = tmp_path / "scratch2"
    scratch.mkdir()
    mounts.write_text(f"tmpfs {tmpfs} tmpfs rw 0 0\n")
    assert memory_folder(scratch, f"{2**40}K", tmpfs, mounts) == scratch / "uml"
