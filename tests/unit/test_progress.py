"""A long sync's progress: the IPVS writes reported step by step, logged now and then."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from click.testing import CliRunner

from ipvsproxy import cli
from ipvsproxy.daemon.progress import ProgressLog
from ipvsproxy.kernel.protocols import Kernel
from ipvsproxy.kernel.testing import FakeKernel
from ipvsproxy.model import BindAddress, TransportProtocol, VirtualServerKey
from ipvsproxy.reconcile.apply import PROGRESS_STEP
from ipvsproxy.reconcile.reconciler import Reconciler
from tests.unit.reconcile_kit import POD_A, desired, ip


def test_the_ipvs_writes_are_reported_step_by_step_and_all_applied() -> None:
    services = {
        VirtualServerKey(TransportProtocol.TCP, ip(f"10.96.{n // 250}.{n % 250 + 1}"), 80): [POD_A]
        for n in range(1300)
    }
    heard: list[tuple[int, int]] = []
    fake = FakeKernel()
    result = Reconciler(fake.kernel()).sync(desired(services), progress=lambda *p: heard.append(p))
    assert result.ok
    assert heard == [(PROGRESS_STEP, 2600), (2000, 2600), (2600, 2600)]
    assert len(fake.ipvs.dump()) == 1300


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_is_logged_only_for_a_long_sync_and_then_every_few_seconds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="ipvsproxy.daemon.progress")
    clock = Clock()
    progress = ProgressLog(clock, quiet_for=5.0)
    for now, done in ((101.0, 1000), (104.9, 2000), (105.0, 3000), (107.0, 4000), (110.5, 5000)):
        clock.now = now
        progress(done, 121000)
    assert [record.getMessage() for record in caplog.records] == [
        "programming IPVS: 3000 of 121000 writes done",
        "programming IPVS: 5000 of 121000 writes done",
    ]


def test_sync_once_draws_no_bar_where_stderr_is_no_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A log or a captured stream gets no progress bar, nor click's label for one."""
    fake = FakeKernel()
    # The example node's own address, on an interface as on a node: its NodePorts serve there.
    fake.addresses.ensure_interface("eth0")
    fake.addresses.apply("eth0", [BindAddress(ip("192.168.10.11"))])

    @contextmanager
    def opened() -> Iterator[Kernel]:
        yield fake.kernel()

    monkeypatch.setattr(cli, "real_kernel", opened)
    monkeypatch.setattr(cli, "require_net_admin", lambda: None)
    monkeypatch.setattr(cli, "check_schedulers", lambda *_: None)
    args = ["sync", "--once", "--source", "examples/cluster.yaml", "--hostname-override", "node-a"]
    result = CliRunner().invoke(cli.main, [*args, "--output", "json"])
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    assert json.loads(result.stdout)["failures"] == []
    assert len(fake.ipvs.dump()) == 8
