from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ipvsproxy.cluster.connection import ApiConnection, RetryPolicy, Timeouts, connect
from tests.api.fake_apiserver import FakeApiServer

# No waiting between retries and a short read timeout: the tests check outcomes, not time.
FAST_RETRY = RetryPolicy(attempts=3, first_delay=0.0, max_delay=0.0)
SHORT_TIMEOUTS = Timeouts(connect=2.0, read=2.0)


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


@pytest.fixture
def kubeconfig(fake: FakeApiServer, tmp_path: Path) -> Path:
    return fake.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def api(kubeconfig: Path) -> Iterator[ApiConnection]:
    with connect(kubeconfig, timeouts=SHORT_TIMEOUTS, retry=FAST_RETRY) as connection:
        yield connection
