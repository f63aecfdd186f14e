from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ipvsproxy.cluster.connection import ApiConnection, RetryPolicy, Timeouts, connect
from tests.api.fake_apiserver import FakeApiServer
from tests.api.kube import SESSION_APISERVER_ARGS, Kube, namespace_for
from tests.controlplane.build import located
from tests.controlplane.cluster import ControlPlane
from tests.requires import missing

# No waiting between retries: the tests check outcomes, not time.
FAST_RETRY = RetryPolicy(attempts=3, first_delay=0.0, max_delay=0.0)
# Short against the fake, which answers at once or is made to stall on purpose.
SHORT_TIMEOUTS = Timeouts(connect=2.0, read=2.0)
# The real API server on a machine shared with other work: a bound for a hung server only.
REAL_TIMEOUTS = Timeouts(connect=5.0, read=15.0)
TMPFS = Path("/dev/shm")
NEEDS_THE_FAKE = "Needs the fake:"


@pytest.fixture(scope="session")
def controlplane_binaries() -> Path:
    """The folder of the real etcd, kube-apiserver, kube-controller-manager and kube-proxy."""
    binaries = located()
    if binaries is None:
        missing("the control plane is not built: run `nox -s controlplane` (or `nox -s tests`)")
    return binaries


@pytest.fixture(scope="session")
def control_plane(
    controlplane_binaries: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControlPlane]:
    """etcd and kube-apiserver, once for the session (see ``tests/api/kube.py`` for why they
    run as they do)."""
    binaries = controlplane_binaries
    # etcd's data in memory: --unsafe-no-fsync alone still writes every change to disk.
    parent = TMPFS if TMPFS.is_dir() and os.access(TMPFS, os.W_OK) else None
    folder = Path(
        tempfile.mkdtemp(prefix="ipvsproxy-api-", dir=parent or tmp_path_factory.getbasetemp())
    )
    plane = ControlPlane(binaries, folder, apiserver_args=SESSION_APISERVER_ARGS)
    try:
        plane.start()
        yield plane
    finally:
        # Nothing is left to drain: a graceful stop took 9 s under load.
        plane.stop_apiserver(signal.SIGKILL)
        plane.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def kube(
    control_plane: ControlPlane, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Kube]:
    """This test's namespace on the shared API server; what it wrote is deleted after it."""
    kube = Kube(control_plane, namespace_for(request.node.name), tmp_path)
    kube.create_namespace()
    yield kube
    kube.cleanup()


@pytest.fixture
def real_api(control_plane: ControlPlane) -> Iterator[ApiConnection]:
    """A connection to the real API server as its admin, through the admin kubeconfig."""
    with connect(control_plane.kubeconfig, timeouts=REAL_TIMEOUTS, retry=FAST_RETRY) as api:
        yield api


@pytest.fixture
def fake(request: pytest.FixtureRequest) -> Iterator[FakeApiServer]:
    """The fake API server, for the faults a real one cannot be made to produce; a test using
    it says which in the first line of its docstring, ``Needs the fake: ...``."""
    function = getattr(request.node, "function", None)
    doc = ((function.__doc__ if function is not None else None) or "").strip()
    if not doc.startswith(NEEDS_THE_FAKE):
        pytest.fail(f'a test on the fake API server says why first: """{NEEDS_THE_FAKE} ..."""')
    with FakeApiServer() as server:
        yield server


@pytest.fixture
def kubeconfig(fake: FakeApiServer, tmp_path: Path) -> Path:
    return fake.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def api(kubeconfig: Path) -> Iterator[ApiConnection]:
    with connect(kubeconfig, timeouts=SHORT_TIMEOUTS, retry=FAST_RETRY) as connection:
        yield connection
