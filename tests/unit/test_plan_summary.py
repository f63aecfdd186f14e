"""A big plan in a screenful: counts by kind and by namespace, and the skipped objects."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from ipvsproxy import cli
from ipvsproxy.cli import main
from ipvsproxy.kernel.bundle import FakeKernel
from ipvsproxy.kernel.errors import IPVSUnavailable
from ipvsproxy.kernel.protocols import Kernel
from tests.daemon_kit import endpoint_slice, node, service


def _cluster(services: int, namespaces: int) -> list[dict[str, Any]]:
    objects = [node()]
    for index in range(services):
        namespace = f"team-{index % namespaces:02d}"
        svc, slice_ = service(index), endpoint_slice(index, endpoints=2)
        svc["metadata"]["namespace"] = slice_["metadata"]["namespace"] = namespace
        objects += [svc, slice_]
    bad = service(services, clusterIP="10.96.0.999")
    objects.append(bad)
    return objects


@pytest.fixture
def big(tmp_path: Path) -> Path:
    """400 services x 2 endpoints in 25 namespaces, and one invalid: 1,200 IPVS operations."""
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(_cluster(400, 25)))
    return path


@pytest.fixture(autouse=True)
def _no_ipvs(monkeypatch: pytest.MonkeyPatch) -> None:
    def without() -> Any:
        raise IPVSUnavailable("No such file or directory")

    monkeypatch.setattr(cli, "real_kernel", without)


def _dry_run(source: Path, *args: str) -> list[str]:
    command = ["sync", "--once", "--dry-run", "--source", str(source), "--hostname-override"]
    result = CliRunner().invoke(main, [*command, "node-a", *args])
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def test_a_big_plan_is_summarized_by_default(big: Path) -> None:
    lines = _dry_run(big)
    assert len(lines) < 60
    assert lines[1] == "# summary (over 1000 operations; --full lists each)"
    assert "virtual servers: 400 to add, 0 to update, 0 to delete" in lines
    assert "real servers: 800 to add, 0 to update, 0 to delete, 0 draining" in lines
    at = lines.index("by namespace (virtual servers added, updated, deleted; then real servers):")
    # 16 services in each of 25 namespaces: the first 20 by name, then the rest in one line.
    assert lines[at + 1] == "  team-00  +16 ~0 -0   +32 ~0 -0"
    assert lines[at + 21] == "  ... and 5 more namespaces with 240 operations"
    assert lines[-2] == "skipped 1 objects (1 invalid):"
    assert lines[-1].startswith("skipped Service default/svc-400: clusterIP")


def test_full_lists_every_operation_and_summary_any_plan(big: Path) -> None:
    full = _dry_run(big, "--full")
    assert sum(line.startswith("+ TCP ") for line in full) == 400
    small = Path("examples/cluster.yaml")
    summary = _dry_run(small, "--summary")
    assert summary[1] == "# summary"
    assert "virtual servers: 8 to add, 0 to update, 0 to delete" in summary
    assert "skipped nothing" in summary


def test_json_is_never_summarized(big: Path) -> None:
    (text,) = ["\n".join(_dry_run(big, "--output", "json"))]
    assert json.loads(text)["counts"]["AddRealServer"] == 800


def test_takeover_check_summarizes_a_big_plan_above_its_verdict(
    big: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    @contextmanager
    def empty_kernel() -> Iterator[Kernel]:
        yield FakeKernel().kernel()

    monkeypatch.setattr(cli, "real_kernel", empty_kernel)
    monkeypatch.setattr(cli, "require_net_admin", lambda: None)
    command = ["takeover", "--check", "--source", str(big), "--hostname-override", "node-a"]
    result = CliRunner().invoke(main, command)

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) < 60
    assert lines[1] == "# summary (over 1000 operations; --full lists each)"
    assert "virtual servers: 400 to add, 0 to update, 0 to delete" in lines
    assert "takeover: safe" in result.stdout
    full = CliRunner().invoke(main, [*command, "--full"]).stdout.splitlines()
    assert sum(line.startswith("+ TCP ") for line in full) == 400
