"""`ipvsproxy sync --once --dry-run` reading the cluster from the API server through a
kubeconfig: the real one, and the fake one for a trickling answer."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from ipvsproxy.cli import main
from ipvsproxy.cluster.source import load_objects
from tests.api.fake_apiserver import FakeApiServer
from tests.api.kube import Kube
from tests.api.test_read_cluster import EXAMPLE, as_manifest, load_example
from tests.controlplane.cluster import ControlPlane, free_port


def _dry_run(node: str, *args: str) -> list[str]:
    return ["sync", "--once", "--dry-run", "--hostname-override", node, *args]


def test_the_api_gives_the_same_plan_as_the_same_objects_in_a_manifest(
    kube: Kube, tmp_path: Path
) -> None:
    load_example(kube)
    node = kube.node_name("node-a")
    # Everything the API server holds that the proxy reads, the kubernetes Service among it.
    served = [
        *kube.list_items("Service"),
        *kube.list_items("EndpointSlice"),
        kube.get("Node", node) | {"kind": "Node"},
    ]
    manifest = as_manifest(served, tmp_path)
    runner = CliRunner()

    json_plan = ("--output", "json")
    from_api = runner.invoke(main, _dry_run(node, "--kubeconfig", str(kube.kubeconfig), *json_plan))
    from_file = runner.invoke(main, _dry_run(node, "--source", str(manifest), *json_plan))

    assert from_api.exit_code == 0, from_api.output
    assert json.loads(from_api.stdout) == json.loads(from_file.stdout)
    dns = next(s for s in served if s["metadata"]["name"] == "kube-dns")["spec"]["clusterIP"]
    texts = [op["text"] for op in json.loads(from_api.stdout)["operations"]]
    assert f"add real server 10.244.0.5:53 to UDP {dns}:53" in texts


def test_master_overrides_the_kubeconfig_server(control_plane: ControlPlane) -> None:
    closed = f"https://127.0.0.1:{free_port()}"
    result = CliRunner().invoke(
        main, _dry_run("node-a", "--kubeconfig", str(control_plane.kubeconfig), "--master", closed)
    )

    assert result.exit_code == 2
    assert result.output.startswith(f"ipvsproxy: cannot reach the API server at {closed}")
    assert len(result.output.strip().splitlines()) == 1


def test_a_refused_list_exits_2_in_one_line(control_plane: ControlPlane, tmp_path: Path) -> None:
    kubeconfig = control_plane.write_kubeconfig(tmp_path / "kubeconfig", token="revoked")

    result = CliRunner().invoke(main, _dry_run("node-a", "--kubeconfig", str(kubeconfig)))

    assert result.exit_code == 2
    assert result.output == (
        f"ipvsproxy: listing Services from the API server at {control_plane.server}: "
        "401 Unauthorized\n"
    )


def test_a_trickling_api_server_fails_the_sync_within_its_deadline(
    fake: FakeApiServer, kubeconfig: Path
) -> None:
    """Needs the fake: a real API server cannot be made to send its answer a byte at a time."""
    for obj in load_objects(EXAMPLE):
        fake.apply(obj)
    # Every byte arrives well within the read timeout, so only an overall deadline ends this.
    fake.trickle(0.2)

    result = CliRunner().invoke(
        main, _dry_run("node-a", "--kubeconfig", str(kubeconfig), "--api-timeout", "1s")
    )

    assert result.exit_code == 2
    assert result.output == (
        f"ipvsproxy: reading the cluster from the API server at {fake.url}: "
        "not done within 1 s (--api-timeout)\n"
    )
