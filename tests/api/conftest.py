from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ipvsproxy.cluster.connection import ApiConnection, RetryPolicy, Timeouts, connect
from tests.api.fake_apiserver import FakeApiServer, Request
from tests.api.test_read_cluster import SERVICES_PATH, service

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


@pytest.fixture
def token_expiring_after_first_page(fake: FakeApiServer) -> None:
    """Between the first and the second page of a Service list, the continue token expires and
    the cluster moves on: svc-0 is deleted and svc-new added."""

    def expire_after_first_page(request: Request) -> None:
        if request.path == SERVICES_PATH and "continue" in request.query:
            fake.on_request = None
            fake.expire_continue_tokens()
            fake.delete("Service", "default", "svc-0")
            fake.apply(service("svc-new"))

    fake.on_request = expire_after_first_page
