"""The command line facing broken and hostile input: one line, exit 2, nothing deleted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ipvsproxy import cli
from ipvsproxy.cli import main
from ipvsproxy.kernel.errors import PreconditionError
from tests.unit.test_bounded_load import LAUGHS

EXAMPLE = "examples/cluster.yaml"


def _dry_run(*args: str) -> list[str]:
    return ["sync", "--once", "--dry-run", "--hostname-override", "node-a", *args]


def _one_line_exit_2(args: list[str]) -> str:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert len(result.output.splitlines()) == 1, result.output
    assert "Traceback" not in result.output
    return result.output


def test_an_empty_source_is_refused_unless_allowed(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    output = _one_line_exit_2(_dry_run("--source", str(empty)))
    assert output.startswith(f"ipvsproxy: {empty}: no Service found")
    allowed = CliRunner().invoke(main, _dry_run("--source", str(empty), "--allow-empty"))
    assert allowed.exit_code == 0, allowed.output


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (LAUGHS, "YAML aliases expand the document far beyond its own size"),
        ("[" * 600 + "]" * 600, "nested deeper than 100 levels"),
        ("".join(" " * level + "a:\n" for level in range(600)), "nested deeper than 100 levels"),
    ],
    ids=["alias-bomb", "deep-flow", "deep-mappings"],
)
@pytest.mark.parametrize("option", ["--source", "--config"])
def test_hostile_files_are_one_line_exit_2(
    tmp_path: Path, content: str, message: str, option: str
) -> None:
    path = tmp_path / "hostile.yaml"
    path.write_text(content)
    extra = ["--source", EXAMPLE] if option == "--config" else []
    output = _one_line_exit_2(_dry_run(option, str(path), *extra))
    assert message in output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--detect-local-mode", "BridgeInterface"], "needs --pod-bridge-interface"),
        (["--detect-local-mode", "InterfaceNamePrefix"], "needs --pod-interface-name-prefix"),
        (["--service-external-ip-range", "nowhere"], "--service-external-ip-range nowhere"),
    ],
)
def test_flag_combinations_kube_proxy_refuses_are_usage_errors(
    args: list[str], message: str
) -> None:
    assert message in _one_line_exit_2(_dry_run("--source", EXAMPLE, *args))


def _plan(monkeypatch: pytest.MonkeyPatch, source: str = EXAMPLE) -> dict[str, Any]:
    def no_ipvs(*_: object) -> None:
        raise PreconditionError("no IPVS in this test")

    monkeypatch.setattr(cli, "require_net_admin", no_ipvs)
    result = CliRunner().invoke(main, _dry_run("--source", source, "--output", "json"))
    assert result.exit_code == 0, result.output
    plan: dict[str, Any] = json.loads(result.stdout)
    return plan


ENDPOINT = {"protocol": str, "address": str, "port": int}
# README's "JSON output": the fields every operation kind carries beyond op and text.
OPERATION_FIELDS: dict[str, dict[str, Any]] = {
    "SetSysctl": {"sysctl": str, "value": str, "current": (str, type(None))},
    "EnsureInterface": {"interface": str},
    "BindAddress": {"address": str},
    "CreateIPSet": {"ipset": str, "set_type": str, "family": str},
    "AddIPSetEntries": {"ipset": str, "entries": list},
    "RestoreIptables": {"family": str},
    "AddVirtualServer": {
        "virtual_server": ENDPOINT,
        "service": str,
        "address_kind": str,
        "scheduler": str,
        "persistence_timeout": int,
    },
    "AddRealServer": {
        "virtual_server": ENDPOINT,
        "service": str,
        "address_kind": str,
        "real_server": {"address": str, "port": int},
        "weight": int,
    },
}


def _matches(value: Any, shape: Any) -> bool:
    if isinstance(shape, dict):
        return (
            isinstance(value, dict)
            and set(value) == set(shape)
            and all(_matches(value[key], sub) for key, sub in shape.items())
        )
    return isinstance(value, shape) and not (shape is int and isinstance(value, bool))


def test_json_plan_follows_the_documented_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = _plan(monkeypatch)
    assert set(plan) == {
        "schema",
        "dry_run",
        "against",
        "against_reason",
        "operations",
        "draining",
        "counts",
        "skipped",
        "skipped_by_reason",
    }
    assert plan["schema"] == "ipvsproxy.io/sync-plan/v1"
    assert plan["dry_run"] is True
    assert (plan["against"], plan["against_reason"]) == ("empty", "no IPVS in this test")
    assert {op["op"] for op in plan["operations"]} == set(OPERATION_FIELDS)
    for op in plan["operations"]:
        shape = {"op": str, "text": str, **OPERATION_FIELDS[op["op"]]}
        assert _matches(op, shape), op
    udp_dns = {
        "op": "AddVirtualServer",
        "text": "add virtual server UDP 10.96.0.10:53 rr",
        "virtual_server": {"protocol": "UDP", "address": "10.96.0.10", "port": 53},
        "service": "kube-system/kube-dns:dns",
        "address_kind": "ClusterIP",
        "scheduler": "rr",
        "persistence_timeout": 0,
    }
    assert udp_dns in plan["operations"]
    assert plan["skipped_by_reason"] == {
        "invalid": 0,
        "duplicate": 0,
        "address_conflict": 0,
        "unusable_address": 0,
        "external_ip_not_allowed": 0,
        "node_address": 0,
        "node_port_not_allowed": 0,
    }


def test_json_plan_lists_each_skip_with_its_category(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "cluster.yaml").write_text(Path(EXAMPLE).read_text())
    (tmp_path / "evil.yaml").write_text(
        "kind: Service\nmetadata: {name: evil, namespace: aaa}\n"
        "spec:\n  clusterIP: 10.96.99.99\n  externalIPs: [10.96.0.10, 169.254.169.254]\n"
        "  ports: [{name: metrics, port: 9153}]\n"
    )
    plan = _plan(monkeypatch, str(tmp_path))
    assert plan["skipped_by_reason"]["address_conflict"] == 1
    assert plan["skipped_by_reason"]["unusable_address"] == 1
    services = {op.get("service") for op in plan["operations"]}
    assert {"kube-system/kube-dns:dns", "kube-system/kube-dns:dns-tcp"} <= services
    assert "kube-system/kube-dns:metrics" in services


def test_a_plan_names_node_addresses_and_node_ports_a_source_file_tries_to_take(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A --source file has no API server allocating its node ports: the proxy settles them,
    and no address of a Node in the file (node-b is another node) goes to a Service."""
    (tmp_path / "cluster.yaml").write_text(Path(EXAMPLE).read_text())
    (tmp_path / "tenant.yaml").write_text(
        "kind: Service\nmetadata: {name: tenant, namespace: aaa}\n"
        "spec:\n  type: NodePort\n  clusterIP: 10.96.99.98\n"
        "  externalIPs: [192.168.10.11, 192.168.10.12]\n"
        "  ports: [{name: ssh, port: 22, nodePort: 10250},\n"
        "          {name: web, port: 80, nodePort: 30999}]\n"
    )
    plan = _plan(monkeypatch, str(tmp_path))
    skipped = {(entry["object"], entry["category"], entry["reason"]) for entry in plan["skipped"]}
    assert skipped == {
        (
            "Service aaa/tenant",
            "node_address",
            "externalIP 192.168.10.11 is this node's address; ignored",
        ),
        (
            "Service aaa/tenant",
            "node_address",
            "externalIP 192.168.10.12 is Node node-b's address; ignored",
        ),
        (
            "Service aaa/tenant",
            "node_port_not_allowed",
            "nodePort 10250 is a port this node serves itself (kubelet, health or metrics); "
            "ignored",
        ),
    }
    assert plan["skipped_by_reason"]["node_address"] == 2
    addresses = {
        op["virtual_server"]["address"] for op in plan["operations"] if "virtual_server" in op
    }
    assert "192.168.10.12" not in addresses
    ports = {
        op["virtual_server"]["port"]
        for op in plan["operations"]
        if op["op"] == "AddVirtualServer" and op["virtual_server"]["address"] == "192.168.10.11"
    }
    assert 30999 in ports and 22 not in ports and 10250 not in ports


def _command_exit_2(args: list[str]) -> str:
    """The command run as a process of its own: a FIFO that blocked it would time out."""
    done = subprocess.run(
        [sys.executable, "-m", "ipvsproxy", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    return done.stderr.strip()


@pytest.mark.parametrize("option", ["--source", "--config"])
def test_a_fifo_is_refused_in_one_line_without_blocking(tmp_path: Path, option: str) -> None:
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    extra = ["--source", EXAMPLE] if option == "--config" else []
    message = _command_exit_2(_dry_run(option, str(fifo), *extra))
    assert message.endswith(f"{fifo}: not a regular file but a FIFO; not read")


@pytest.mark.parametrize("option", ["--source", "--config"])
def test_dev_zero_is_refused_in_one_line(option: str) -> None:
    extra = ["--source", EXAMPLE] if option == "--config" else []
    message = _command_exit_2(_dry_run(option, "/dev/zero", *extra))
    assert message.endswith("/dev/zero: not a regular file but a character device; not read")


def test_a_config_file_over_one_mebibyte_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("# " + "x" * (1 << 20) + "\n")
    output = _one_line_exit_2(_dry_run("--config", str(config), "--source", EXAMPLE))
    assert output == (
        f"ipvsproxy: --config {config}: {(1 << 20) + 3} bytes, over the bound of 1048576 bytes "
        "for a config file; not read\n"
    )


def test_a_source_file_over_source_max_file_size_is_refused(tmp_path: Path) -> None:
    size = Path(EXAMPLE).stat().st_size
    output = _one_line_exit_2(_dry_run("--source", EXAMPLE, "--source-max-file-size", "1Ki"))
    assert output == (
        f"ipvsproxy: {EXAMPLE}: {size} bytes, over the bound of 1024 bytes "
        "(--source-max-file-size); not read\n"
    )
    allowed = CliRunner().invoke(
        main, _dry_run("--source", EXAMPLE, "--source-max-file-size", str(size))
    )
    assert allowed.exit_code == 0, allowed.output


@pytest.mark.parametrize("value", ["64Q", "-1", "0", "1.5Mi"])
def test_a_bad_source_max_file_size_is_a_usage_error(value: str) -> None:
    output = _one_line_exit_2(_dry_run("--source", EXAMPLE, f"--source-max-file-size={value}"))
    assert output.startswith(f"ipvsproxy: --source-max-file-size {value!r}: ")
