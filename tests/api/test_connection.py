"""connect(): the client kube-proxy's flags select, and one-line errors for every failure."""

from __future__ import annotations

import base64
import importlib
import json
import subprocess
import urllib.parse
from pathlib import Path

import pytest

from ipvsproxy.cluster.api import read_cluster
from ipvsproxy.cluster.connection import ApiError, Timeouts, connect
from tests.api.conftest import FAST_RETRY
from tests.api.fake_apiserver import FakeApiServer
from tests.api.kube import Kube
from tests.controlplane.cluster import free_port


def services_read(kube: Kube, **kwargs: object) -> int:
    """This test's Services read through a connection made with ``kwargs``."""
    kube.add({"kind": "Service", "metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}})
    with connect(**kwargs) as api:  # type: ignore[arg-type]
        services = read_cluster(api, "node-a").snapshot.services
        return sum(1 for key in services if key.namespace == kube.namespace)


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
    """A loopback URL where nothing listens."""
    return f"https://127.0.0.1:{free_port()}"


def test_kubeconfig_reaches_its_server(kube: Kube) -> None:
    assert services_read(kube, kubeconfig=kube.kubeconfig) == 1


def test_master_overrides_the_kubeconfig_server(
    kube: Kube, tmp_path: Path, closed_port_url: str
) -> None:
    # The kubeconfig's token and CA, the master's address: as kube-proxy combines them.
    server = kube.control_plane.server
    stale = tmp_path / "stale"
    stale.write_text(kube.kubeconfig.read_text().replace(server, closed_port_url))
    assert services_read(kube, kubeconfig=stale, master=server + "/") == 1


def test_neither_flag_falls_back_to_the_default_kubeconfig(
    kube: Kube, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig))
    assert services_read(kube) == 1


def test_in_a_cluster_the_service_account_reaches_the_server(
    kube: Kube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pod's service account: the address from the environment, the token and CA from files
    (the client's loader reads them at /var/run/secrets/..., here this test's files)."""
    config = json.loads(kube.kubeconfig.read_text())
    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text(config["users"][0]["user"]["token"])
    ca.write_bytes(base64.b64decode(config["clusters"][0]["cluster"]["certificate-authority-data"]))
    server = urllib.parse.urlsplit(kube.control_plane.server)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", str(server.hostname))
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(server.port))
    # The loader as the proxy loads it (alone, see kubernetes_client.py).
    incluster_config = importlib.import_module("kubernetes.config.incluster_config")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(ca))
    assert services_read(kube) == 1


def test_a_certificate_the_kubeconfig_does_not_trust_is_one_line(
    kube: Kube, tmp_path: Path
) -> None:
    key, other_ca = tmp_path / "ca.key", tmp_path / "ca.crt"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=someone-else", "-keyout", str(key), "-out", str(other_ca)],
        check=True, capture_output=True,
    )  # fmt: skip
    config = json.loads(kube.kubeconfig.read_text())
    config["clusters"][0]["cluster"].pop("certificate-authority-data")
    config["clusters"][0]["cluster"]["certificate-authority"] = str(other_ca)
    untrusting = tmp_path / "kubeconfig"
    untrusting.write_text(json.dumps(config))

    message = one_line_error(kubeconfig=untrusting)

    assert message == (
        f"cannot reach the API server at {kube.control_plane.server}: "
        "TLS certificate verify failed: self-signed certificate in certificate chain"
    )


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
    """Needs the fake: a real API server cannot be made to accept a request and never answer."""
    fake.stall()
    message = one_line_error(kubeconfig=kubeconfig, timeouts=Timeouts(connect=1.0, read=0.2))
    assert message == f"cannot reach the API server at {fake.url}: timed out"
