"""``--source`` on real files: FIFOs, devices, big files, folders changing while they are read.

The daemon's file source (``FileSource``) is driven one poll at a time with ``poll_once`` where
the order of events matters, and by its own thread where it does not.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import resource
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from ipvsproxy.bounded_load import LoadError, read_bounded
from ipvsproxy.cluster.source import (
    RACY_WINDOW_NS,
    ManifestFolder,
    SourceError,
    load_snapshot,
)
from ipvsproxy.daemon.changes import diff
from ipvsproxy.daemon.sources import FileSource
from ipvsproxy.model import ChangedKeys, ObjectKey
from tests.daemon_kit import NODE, cluster, endpoint_slice, node, service

# Bounds a call that must not block, so that a regression fails instead of hanging the run.
NO_BLOCK = 60.0
AN_HOUR_NS = 3600 * 10**9


def returns(call: Callable[[], Any]) -> Any:
    """``call()``'s result, failing the test if it blocks."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as error:  # handed to the test below
            outcome.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(NO_BLOCK)
    assert outcome, f"{call} blocked"
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


def write(path: Path, objects: list[dict[str, Any]], *, age_ns: int = 0) -> None:
    """Write beside and rename into place; ``age_ns`` sets the mtime that far in the past."""
    partial = path.with_name(f".{path.name}.part")
    partial.write_text(json.dumps(objects))
    if age_ns:
        past = time.time_ns() - age_ns
        os.utime(partial, ns=(past, past))
    partial.rename(path)


def one_service_per_file(folder: Path, count: int, *, age_ns: int = AN_HOUR_NS) -> None:
    write(folder / "node.yaml", [node()], age_ns=age_ns)
    for index in range(count):
        write(folder / f"svc-{index:05}.yaml", [service(index)], age_ns=age_ns)


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe.yaml"
    os.mkfifo(path)
    return path


# -- what is read ------------------------------------------------------------------------------


def test_a_fifo_is_refused_without_blocking(fifo: Path) -> None:
    with pytest.raises(LoadError, match="not a regular file but a FIFO"):
        returns(lambda: read_bounded(fifo, 1024, "(test)"))
    with pytest.raises(SourceError) as caught:
        returns(lambda: load_snapshot(fifo, NODE))
    assert str(caught.value) == f"{fifo}: not a regular file but a FIFO; not read"


def test_dev_zero_is_refused_without_reading_it() -> None:
    with pytest.raises(LoadError, match="not a regular file but a character device"):
        returns(lambda: read_bounded("/dev/zero", 1024, "(test)"))
    with pytest.raises(SourceError, match="/dev/zero: not a regular file but a character device"):
        returns(lambda: load_snapshot(Path("/dev/zero"), NODE))


def test_a_fifo_in_a_folder_is_named_and_the_rest_is_read(tmp_path: Path, fifo: Path) -> None:
    write(tmp_path / "a.yaml", cluster(2))
    snapshot, rejections = returns(lambda: load_snapshot(tmp_path, NODE))
    assert len(snapshot.services) == 2
    assert (str(fifo), "not a regular file but a FIFO; not read") in [
        (r.object, r.reason) for r in rejections
    ]


def test_a_file_over_the_bound_is_refused_in_one_line_and_one_under_it_is_read(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.yaml"
    write(path, cluster(3))
    size = path.stat().st_size
    snapshot, _ = load_snapshot(path, NODE, max_file_size=size)
    assert len(snapshot.services) == 3
    with pytest.raises(SourceError) as caught:
        load_snapshot(path, NODE, max_file_size=size - 1)
    assert str(caught.value) == (
        f"{path}: {size} bytes, over the bound of {size - 1} bytes (--source-max-file-size); "
        "not read"
    )


def test_a_file_that_grows_past_the_bound_after_fstat_is_refused(tmp_path: Path) -> None:
    # /proc files report size 0 to fstat and then read longer: what a file growing between the
    # size check and the read looks like.
    with pytest.raises(LoadError, match="more than 10 bytes, over the bound of 10 bytes"):
        read_bounded("/proc/self/status", 10, "(test)")


def test_a_file_longer_than_its_fstat_size_is_read_whole_within_the_bound() -> None:
    data, opened = read_bounded("/proc/self/status", 1 << 20, "(test)")
    assert opened.st_size == 0
    assert data.startswith(b"Name:") and data.endswith(b"\n") and b"VmRSS" in data


def test_a_file_is_read_whole_in_one_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = tmp_path / "big.json"
    manifest.write_bytes(b"x" * (3 << 20))
    sizes: list[int] = []
    real_read = os.read

    def recording_read(fd: int, size: int) -> bytes:
        sizes.append(size)
        return real_read(fd, size)

    monkeypatch.setattr(os, "read", recording_read)
    data, _ = read_bounded(manifest, 10 << 20, "(test)")
    assert data == b"x" * (3 << 20)
    # The whole file, then the end of it: no chunks joined into a second copy.
    assert sizes == [(3 << 20) + 1, 1 << 20]


# -- an incremental reading is the reading afresh -------------------------------------------------

# Objects files may hold: two versions of two services, a slice, the node, an invalid service.
OBJECTS = [
    service(1),
    service(1, clusterIP="10.99.0.1"),
    service(2),
    service(2, clusterIP="10.99.0.2"),
    endpoint_slice(1),
    node(),
    {"kind": "Service", "metadata": {"name": "Bad Name", "namespace": "default"}},
    # Another node, whose addresses the snapshot keeps, at one address and then another.
    node("node-b", "192.168.10.12"),
    node("node-b", "192.168.10.13"),
]
FILES = ["a.yaml", "b.json", "sub/c.yaml", "sub/deeper/d.yml"]
# (file, the objects it is written with), or (file, None): removed.
Step = tuple[str, list[int] | None]
steps = st.lists(
    st.tuples(
        st.sampled_from(FILES),
        st.none() | st.lists(st.integers(0, len(OBJECTS) - 1), max_size=4),
    ),
    min_size=1,
    max_size=12,
)


def apply_step(root: Path, step: Step, mtime_ns: int) -> None:
    path = root / step[0]
    if step[1] is None:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([OBJECTS[index] for index in step[1]]))
    # Each write a stamp of its own, old enough not to be read again for its content.
    os.utime(path, ns=(mtime_ns, mtime_ns))


@settings(max_examples=60, deadline=None)
@given(steps)
def test_a_refreshed_folder_reads_as_the_same_folder_read_afresh(history: list[Step]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        apply_step(root, (FILES[0], [0, 4, 5]), AN_HOUR_NS)
        kept = ManifestFolder(root, NODE)
        kept.refresh()
        before, _ = kept.snapshot()
        kept.take_changes()
        for number, step in enumerate(history, start=1):
            apply_step(root, step, AN_HOUR_NS + number)
            kept.refresh()
            afresh = ManifestFolder(root, NODE)
            afresh.refresh()
            snapshot, rejections = kept.snapshot()
            expected, expected_rejections = afresh.snapshot()
            assert snapshot == expected
            assert sorted(map(repr, rejections)) == sorted(map(repr, expected_rejections))
            assert kept.problems == afresh.problems
            # What the daemon's sync compares, given the changes taken, is what changed.
            assert diff(before, snapshot, kept.take_changes()) == diff(before, snapshot)
            before = snapshot


# -- the daemon's folder: incremental, stable, never killed --------------------------------------


def source(folder: Path, **kwargs: Any) -> FileSource:
    return FileSource(folder, NODE, on_change=lambda: None, **kwargs)


def published(files: FileSource) -> set[ObjectKey]:
    return set(files.snapshot().snapshot.services)


def test_one_changed_file_of_ten_thousand_is_read_alone(tmp_path: Path) -> None:
    one_service_per_file(tmp_path, 10_000)
    folder = ManifestFolder(tmp_path, NODE)
    assert folder.refresh().read == 10_001
    assert folder.refresh().read == 0
    folder.take_changes()
    write(tmp_path / "svc-04242.yaml", [service(4242, clusterIP="10.99.0.1")])
    refresh = folder.refresh()
    assert (refresh.read, refresh.changed) == (1, True)
    changes = folder.take_changes()
    assert changes.services == {ObjectKey("default", "svc-4242")}
    snapshot, _ = folder.snapshot()
    assert len(snapshot.services) == 10_000
    assert snapshot.services[ObjectKey("default", "svc-4242")].cluster_ips == ("10.99.0.1",)


def test_the_daemon_gets_the_one_changed_service_not_the_folder(tmp_path: Path) -> None:
    one_service_per_file(tmp_path, 50)
    files = source(tmp_path)
    files.poll_once()
    assert files.snapshot().changed is not None
    (tmp_path / "svc-00007.yaml").unlink()
    write(tmp_path / "svc-00050.yaml", [service(50)])
    files.poll_once()
    reading = files.snapshot()
    assert reading.changed is not None
    assert reading.changed.services == {
        ObjectKey("default", "svc-7"),
        ObjectKey("default", "svc-50"),
    }
    assert len(reading.snapshot.services) == 50
    assert files.snapshot().changed == ChangedKeys(frozenset(), frozenset())


def test_a_rewrite_within_one_timestamp_tick_is_seen_by_content(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    write(path, [service(1)])
    stat = path.stat()
    folder = ManifestFolder(tmp_path, None)
    folder.refresh()
    path.write_text(json.dumps([service(2)]).replace("svc-2", "svc-1"))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size
    assert folder.refresh().changed
    snapshot, _ = folder.snapshot()
    assert snapshot.services[ObjectKey("default", "svc-1")].cluster_ips == ("10.96.0.3",)


def test_a_file_older_than_the_racy_window_is_not_read_again(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", [service(1)], age_ns=RACY_WINDOW_NS)
    folder = ManifestFolder(tmp_path, None)
    assert folder.refresh().read == 1
    assert folder.refresh().read == 0


def test_a_folder_recreated_file_by_file_keeps_the_last_good_reading(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "cluster"
    folder.mkdir()
    one_service_per_file(folder, 15)
    files = source(folder)
    files.poll_once()
    assert len(published(files)) == 15
    shutil.rmtree(folder)
    folder.mkdir()
    write(folder / "node.yaml", [node()])
    for index in range(15):
        write(folder / f"svc-{index:05}.yaml", [service(index)])
        files.poll_once()
        assert len(published(files)) == 15, f"after file {index + 1}"
    holds = [r.getMessage() for r in caplog.records if "waiting until" in r.getMessage()]
    assert holds == [
        f"{folder}: this reading would delete 14 of the 15 services of the last good one; "
        "waiting until the folder has been stable for 2 polls"
    ]


def test_a_mass_deletion_is_applied_once_the_folder_is_stable_for_two_polls(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    one_service_per_file(tmp_path, 15)
    files = source(tmp_path)
    files.poll_once()
    for index in range(1, 15):
        (tmp_path / f"svc-{index:05}.yaml").unlink()
    files.poll_once()
    files.poll_once()
    assert len(published(files)) == 15
    files.poll_once()
    assert published(files) == {ObjectKey("default", "svc-0")}
    assert f"{tmp_path}: stable for 2 polls; deleting 14 of 15 services" in caplog.messages


def test_deleting_half_or_less_is_applied_at_once(tmp_path: Path) -> None:
    one_service_per_file(tmp_path, 4)
    files = source(tmp_path)
    files.poll_once()
    for index in (0, 1):
        (tmp_path / f"svc-{index:05}.yaml").unlink()
    files.poll_once()
    assert len(published(files)) == 2


def test_a_broken_file_keeps_the_last_good_reading_and_is_reported_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    one_service_per_file(tmp_path, 3)
    files = source(tmp_path)
    files.poll_once()
    (tmp_path / "svc-00001.yaml").write_text("kind: [unclosed")
    for _ in range(3):
        files.poll_once()
    assert len(published(files)) == 3
    assert len([m for m in caplog.messages if "keeping the last good reading" in m]) == 1
    write(tmp_path / "svc-00001.yaml", [service(1, clusterIP="10.99.0.1")])
    files.poll_once()
    reading = files.snapshot()
    assert reading.snapshot.services[ObjectKey("default", "svc-1")].cluster_ips == ("10.99.0.1",)


@pytest.fixture
def churning_subfolders(tmp_path: Path) -> Iterator[Path]:
    """Sub-folders with a manifest each, created and removed over and over meanwhile."""
    folder = tmp_path / "cluster"
    folder.mkdir()
    one_service_per_file(folder, 1)
    stop = threading.Event()

    def churn() -> None:
        for turn in range(1_000_000):
            if stop.is_set():
                return
            sub = folder / f"sub-{turn % 3}"
            sub.mkdir(exist_ok=True)
            (sub / "svc.yaml").write_text(yaml.safe_dump(service(100 + turn % 3)))
            shutil.rmtree(sub, ignore_errors=True)

    thread = threading.Thread(target=churn, daemon=True)
    thread.start()
    yield folder
    stop.set()
    thread.join()


def test_subfolders_vanishing_while_polled_are_not_an_error(
    churning_subfolders: Path, caplog: pytest.LogCaptureFixture
) -> None:
    files = source(churning_subfolders)
    for _ in range(300):
        files.poll_once()
    assert ObjectKey("default", "svc-0") in published(files)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@contextlib.contextmanager
def no_descriptor_left() -> Iterator[None]:
    """RLIMIT_NOFILE's soft limit lowered inside the block: the next open fails with EMFILE."""
    free = os.dup(0)
    os.close(free)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (free, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_emfile_is_reported_and_the_next_poll_recovers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    one_service_per_file(tmp_path, 2)
    files = source(tmp_path)
    with no_descriptor_left():
        files.poll_once()
    assert caplog.messages == [
        f"{tmp_path}: cannot read: Too many open files; keeping the last good reading"
    ]
    assert not files.wait_for_sync(0)
    files.poll_once()
    assert len(published(files)) == 2


def test_emfile_opening_one_file_is_retried_at_the_next_poll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one_service_per_file(tmp_path, 2)
    files = source(tmp_path)
    files.poll_once()
    write(tmp_path / "svc-00001.yaml", [service(1, clusterIP="10.99.0.1")], age_ns=AN_HOUR_NS)
    listed = _Entries(os.scandir(tmp_path))
    # The folder listed before the limit is lowered: only opening the changed file fails.
    monkeypatch.setattr(os, "scandir", lambda _: listed)
    with no_descriptor_left():
        files.poll_once()
    monkeypatch.undo()
    assert files.snapshot().snapshot.services[ObjectKey("default", "svc-1")].cluster_ips == (
        "10.96.0.2",
    )
    files.poll_once()
    assert files.snapshot().snapshot.services[ObjectKey("default", "svc-1")].cluster_ips == (
        "10.99.0.1",
    )


class _Entries(list[Any]):
    """A listed folder, as ``os.scandir`` returns it (a context manager)."""

    def __enter__(self) -> _Entries:
        return self

    def __exit__(self, *_: object) -> None:
        pass


def test_the_thread_follows_the_folder_and_keeps_the_last_good_reading(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write(tmp_path / "a.yaml", cluster(2))
    changes = threading.Semaphore(0)
    files = FileSource(tmp_path, NODE, on_change=changes.release, poll_interval=0.02)
    files.start()
    try:
        assert files.wait_for_sync(10)
        assert len(files.snapshot()[0].services) == 2
        write(tmp_path / "b.yaml", [service(7), endpoint_slice(7)])
        assert changes.acquire(timeout=10) and changes.acquire(timeout=10)
        assert len(files.snapshot()[0].services) == 3
        (tmp_path / "b.yaml").write_text("kind: [unclosed")
        deadline = time.monotonic() + 10
        while "keeping the last good reading" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "keeping the last good reading" in caplog.text
        assert len(files.snapshot()[0].services) == 3
    finally:
        files.stop()


def test_the_thread_is_not_synced_until_it_reads_once(tmp_path: Path) -> None:
    broken = tmp_path / "a.yaml"
    broken.write_text("kind: [unclosed")
    files = FileSource(broken, NODE, on_change=lambda: None, poll_interval=0.02)
    files.start()
    try:
        assert not files.wait_for_sync(0.2)
        write(broken, cluster(1))
        assert files.wait_for_sync(10)
    finally:
        files.stop()


def test_a_configmap_volume_is_followed_through_its_data_link_swaps(tmp_path: Path) -> None:
    # kubelet's layout: ..data -> a timestamped folder, each key a link through ..data; an update
    # writes a new folder and renames a new ..data link over the old one.
    def publish(version: str, objects: list[dict[str, Any]]) -> None:
        (tmp_path / version).mkdir()
        write(tmp_path / version / "cluster.json", objects, age_ns=AN_HOUR_NS)
        (tmp_path / "..data_tmp").symlink_to(version)
        os.replace(tmp_path / "..data_tmp", tmp_path / "..data")

    publish("..2026_01_01", [node(), service(1), service(2)])
    (tmp_path / "cluster.json").symlink_to("..data/cluster.json")
    files = source(tmp_path)
    files.poll_once()
    assert published(files) == {ObjectKey("default", "svc-1"), ObjectKey("default", "svc-2")}
    publish("..2026_01_02", [node(), service(1), service(2), service(3)])
    files.poll_once()
    assert len(published(files)) == 3
