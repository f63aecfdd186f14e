"""`ipvsproxy sync --once --dry-run` reading the cluster from the (fake) API server."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from ipvsproxy.cli import main
from tests.api.fake_apiserver import FakeApiServer
from tests.api.test_read_cluster import EXAMPLE, load_example


def _dry_run(*args: str) -> list[str]:
    return ["sync", "--once", "--dry-run", "--hostname-override", "node-a", *args]


def test_the_api_gives_the_same_plan_as_the_manifests(
    fake: FakeApiServer, kubeconfig: Path
) -> None:
    load_example(fake)
    runner = CliRunner()

    from_api = runner.invoke(main, _dry_run("--kubeconfig", str(kubeconfig), "--output", "json"))
    from_file = runner.invoke(main, _dry_run("--source", str(EXAMPLE), "--output", "json"))

    assert from_api.exit_code == 0, from_api.output
    assert json.loads(from_api.stdout) == json.loads(from_file.stdout)
    texts = [op["text"] for op in json.loads(from_api.stdout)["operations"]]
    assert "add real server 10.244.0.5:53 to UDP 10.96.0.10:53" in texts


def test_master_overrides_the_kubeconfig_server(fake: FakeApiServer, kubeconfig: Path) -> None:
    load_example(fake)
    fake.stop()

    result = CliRunner().invoke(
        main, _dry_run("--kubeconfig", str(kubeconfig), "--master", "http://127.0.0.1:9")
    )

    assert result.exit_code == 2
    assert result.output.startswith("ipvsproxy: cannot reach the API server at http://127.0.0.1:9")
    assert len(result.output.strip().splitlines()) == 1


def test_a_refused_list_exits_2_in_one_line(fake: FakeApiServer, kubeconfig: Path) -> None:
    fake.fail_next(1, 401)

    result = CliRunner().invoke(main, _dry_run("--kubeconfig", str(kubeconfig)))

    assert result.exit_code == 2
    assert "401" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_trickling_api_server_fails_the_sync_within_its_deadline(
    fake: FakeApiServer, kubeconfig: Path
) -> None:
    load_example(fake)
    # Every byte arrives well within the read timeout, so only an overall deadline ends this.
    fake.trickle(0.2)

    result = CliRunner().invoke(
        main, _dry_run("--kubeconfig", str(kubeconfig), "--api-timeout", "1s")
    )

    assert result.exit_code == 2
    assert result.output == (
        f"ipvsproxy: reading the cluster from the API server at {fake.url}: "
        "not done within 1 s (--api-timeout)\n"
    )
