from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ipvsproxy import __version__
from ipvsproxy.cli import main


def test_version_is_the_package_version() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"ipvsproxy, version {__version__}\n"


def test_help_lists_every_command() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    for command in ("run", "sync", "cleanup", "show"):
        assert f"  {command} " in result.output


@pytest.mark.parametrize("command", ["run"])
def test_unimplemented_commands_exit_2(command: str) -> None:
    result = CliRunner().invoke(main, [command])
    assert result.exit_code == 2
    assert "not implemented yet" in result.output


EXAMPLE = "examples/cluster.yaml"


def test_dry_run_prints_the_example_plan_against_an_empty_table() -> None:
    args = ["sync", "--once", "--dry-run", "--source", EXAMPLE, "--hostname-override", "node-a"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("# dry run against an empty IPVS table")
    assert "+ UDP 10.96.0.10:53 rr  (kube-system/kube-dns:dns, ClusterIP)" in lines
    assert "    + 10.244.0.5:53 masquerade weight 1  (on UDP 10.96.0.10:53)" in lines
    assert lines[-1].startswith("22 operations: 14 AddRealServer, 8 AddVirtualServer")


def test_json_output_counts_the_same_operations() -> None:
    args = ["sync", "--once", "--dry-run", "--source", EXAMPLE, "--output", "json"]
    result = CliRunner().invoke(main, [*args, "--hostname-override", "node-a"])
    assert result.exit_code == 0
    plan = json.loads(result.output)
    assert plan["counts"] == {"AddRealServer": 14, "AddVirtualServer": 8}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["sync", "--dry-run", "--source", EXAMPLE], "sync needs --once"),
        (["sync", "--once", "--dry-run"], "use --source PATH"),
        (["sync", "--once", "--source", EXAMPLE], "use --dry-run"),
        (["sync", "--once", "--dry-run", "--source", EXAMPLE, "--ipvs-scheduler", "x"], "'x'"),
    ],
)
def test_usage_errors_exit_2_in_one_line(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_unparseable_source_exits_2_in_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: [unclosed\n")
    result = CliRunner().invoke(main, ["sync", "--once", "--dry-run", "--source", str(broken)])
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1
