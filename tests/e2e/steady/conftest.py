"""One daemon for the scenarios that only change the cluster: started once, checked after each."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.conftest import running_daemon
from tests.lab.apiserver import ClusterApi
from tests.lab.daemon import Daemon

# Short, so the drift scenario sees a full resync repair the kernel within its wait.
SYNC_PERIOD = 10.0


@pytest.fixture(scope="package")
def daemon(api: ClusterApi, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    directory = tmp_path_factory.mktemp("steady")
    with running_daemon(api, directory, "--ipvs-sync-period", f"{SYNC_PERIOD:g}s") as running:
        yield running


@pytest.fixture(autouse=True)
def _daemon_survives(daemon: Daemon) -> Iterator[None]:
    yield
    assert daemon.alive, f"the daemon died during the test:\n{daemon.log_tail()}"
