"""connect(): the client kube-proxy's flags select, and one-line errors for every failure."""

from __future__ import annotations

from pathlib import Path

import pytest

from ipvsproxy.cluster.api import read_cluster
from ipvsproxy.cluster.connection import ApiError, Timeouts, connect
from tests.api.conftest import FAST_RETRY
from tests.api.fake_apiserver import FakeApiServer


def read_node_count(fake: FakeApiServer, **kwargs: object) -> int:
    """Services read through a connection made with ``kwargs``; proves the server was reached."""
    fake.apply({"kind": "Service", "metadata": {"name": "s"}, "spec": {"clusterIP": "10.0.0.1"}})
    with connect(**kwargs) as api:  # type: ignore[arg-type]
        return len(read_cluster(api, "node-a").snapshot.services)


def one_line_error(**kwargs: object) -> str:
    with (
        pytest.raises(ApiError) as caught,
        connect(retry=FAST_RETRY, **kwargs) as api,  # type: ignore[arg-type]
    ):
        read_cluster(api, "node-a")
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.fixture
def closed_port_url() -> str:
    """A loopback URL where nothing listens any more."""
    with FakeApiServer() as server:
        url = server.url
    return url


def test_kubeconfig_reaches_its_server(fake: FakeApiServer, kubeconfig: Path) -> None:
    assert read_node_count(fake, kubeconfig=kubeconfig) == 1


def test_master_overrides_the_kubeconfig_server(
    fake: FakeApiServer, tmp_path: Path, closed_port_url: str
) -> None:
    # The kubeconfig's token, the master's address: as kube-proxy combines them.
    stale = fake.write_kubeconfig(tmp_path / "stale")
    stale.write_text(stale.read_text().replace(fake.url, closed_port_url))
    assert read_node_count(fake, kubeconfig=stale, master=fake.url + "/") == 1


def test_neither_flag_falls_back_to_the_default_kubeconfig(
    fake: FakeApiServer, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    assert read_node_count(fake) == 1


def test_neither_flag_and_nothing_to_fall_back_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    message = one_line_error()
    assert message.startswith("no API server configured: not in a cluster")
    assert message.endswith("pass --kubeconfig or --master")


def test_missing_kubeconfig(tmp_path: Path) -> None:
    path = tmp_path / "absent"
    assert one_line_error(kubeconfig=path) == f"kubeconfig {path}: no such file"


def test_unusable_kubeconfig(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("apiVersion: v1\nkind: Config\ncurrent-context: nowhere\n")
    assert one_line_error(kubeconfig=path).startswith(f"kubeconfig {path}: ")


def test_master_must_be_a_url() -> None:
    assert "is not a URL" in one_line_error(master="10.0.0.1:6443")


def test_server_down_is_one_line_and_fails_at_once(closed_port_url: str) -> None:
    assert one_line_error(master=closed_port_url) == (
        f"cannot reach the API server at {closed_port_url}: Connection refused"
    )


def test_a_stalled_server_times_out(fake: FakeApiServer, kubeconfig: Path) -> None:
    fake.stall()
    message = one_line_error(kubeconfig=kubeconfig, timeouts=Timeouts(connect=1.0, read=0.2))
    assert message == f"cannot reach the API server at {fake.url}: timed out"
