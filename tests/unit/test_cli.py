from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from ipaddress import ip_network
from pathlib import Path

import pytest
from click.testing import CliRunner

from ipvsproxy import __version__, cli
from ipvsproxy.cli import main
from ipvsproxy.kernel import preconditions
from ipvsproxy.kernel.errors import IPVSUnavailable
from ipvsproxy.kernel.protocols import Kernel
from ipvsproxy.kernel.testing import FakeIPVS, FakeKernel
from ipvsproxy.model import ClusterSnapshot, DesiredState
from ipvsproxy.translate import Settings, translate


def test_version_is_the_package_version() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"ipvsproxy, version {__version__}\n"


def test_help_lists_every_command() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    for command in ("run", "sync", "cleanup", "show"):
        assert f"  {command} " in result.output


EXAMPLE = "examples/cluster.yaml"
NO_IPVS = (
    "ipvsproxy: the kernel offers no IPVS (No such file or directory); load the ip_vs module "
    "(modprobe ip_vs) or run a kernel built with CONFIG_IP_VS\n"
)


def _kernel_without_ipvs() -> Iterator[Kernel]:
    raise IPVSUnavailable("No such file or directory")


@contextmanager
def _fake_kernel(fake: FakeKernel) -> Iterator[Kernel]:
    yield fake.kernel()


@pytest.fixture(autouse=True)
def _no_ipvs_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the machine running the tests has, these commands see a kernel without IPVS."""
    monkeypatch.setattr(cli, "real_kernel", _kernel_without_ipvs)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--healthz-bind-address", "localhost"], "--healthz-bind-address: 'localhost'"),
        (["--metrics-bind-address", "nohost:99"], "--metrics-bind-address"),
        (["--ipvs-sync-period", "soon"], "--ipvs-sync-period 'soon': not a duration"),
        (["--ipvs-sync-period", "3000000h"], "--ipvs-sync-period '3000000h': at most 24h"),
        (["--ipvs-tcp-timeout", "99999999999h"], "--ipvs-tcp-timeout '99999999999h': at most"),
        (["--v", "loud"], "'loud' is not a verbosity level"),
    ],
)
def test_run_refuses_bad_flags_in_one_line_before_touching_anything(
    args: list[str], message: str
) -> None:
    result = CliRunner().invoke(main, ["run", "--source", EXAMPLE, *args])
    assert result.exit_code == 2
    assert message in result.output
    assert len(result.output.splitlines()) == 1


@pytest.mark.parametrize(
    "command",
    [
        ["sync", "--once", "--dry-run"],
        ["show"],
        ["run"],
    ],
)
@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("node-a\nskipped Service x/y: forged", "'node-a\\nskipped Service x/y: forged'"),
        ("node a", "'node a'"),
    ],
)
def test_a_node_name_that_is_not_one_is_refused_at_the_door_by_every_command(
    command: list[str], name: str, shown: str
) -> None:
    result = CliRunner().invoke(main, [*command, "--source", EXAMPLE, "--hostname-override", name])
    assert result.exit_code == 2
    assert result.output.startswith(f"ipvsproxy: --hostname-override {shown}: not a node name")
    assert len(result.output.splitlines()) == 1


@pytest.mark.parametrize("command", [["sync", "--once", "--dry-run"], ["show"], ["run"]])
def test_a_host_name_that_is_no_node_name_stops_the_commands_that_read_the_cluster(
    monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    monkeypatch.setattr("socket.gethostname", lambda: "(none)")
    result = CliRunner().invoke(main, [*command, "--source", EXAMPLE])
    assert result.exit_code == 2
    assert (
        result.output == "ipvsproxy: the host name '(none)': not a node name (a DNS-1123 "
        "subdomain: at most 253 lower-case letters, digits, '-' and '.')\n"
    )


def test_show_without_a_cluster_needs_no_node_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine without a host name (the lab's is "(none)") still shows its kernel's table."""
    monkeypatch.delenv("NODE_NAME", raising=False)
    monkeypatch.setattr("socket.gethostname", lambda: "(none)")
    monkeypatch.setattr(cli, "require_net_admin", lambda: None)
    result = CliRunner().invoke(main, ["show"])
    assert result.output == NO_IPVS


def test_dry_run_prints_the_example_plan_against_an_empty_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cli, "require_net_admin", lambda: None)
    args = ["sync", "--once", "--dry-run", "--source", EXAMPLE, "--hostname-override", "node-a"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    # Without IPVS the plan is against an empty kernel and says why.
    assert lines[0].startswith("# dry run against an empty kernel state (the kernel offers no IPVS")
    assert "+ UDP 10.96.0.10:53 rr  (kube-system/kube-dns:dns, ClusterIP)" in lines
    udp = lines.index("+ UDP 10.96.0.10:53 rr  (kube-system/kube-dns:dns, ClusterIP)")
    assert lines[udp + 1 : udp + 3] == [
        "    + 10.244.0.5:53 masquerade weight 1",
        "    + 10.244.1.7:53 masquerade weight 1",
    ]
    assert lines[-1] == (
        "75 operations: 8 AddIPSetEntries, 14 AddRealServer, 8 AddVirtualServer, "
        "4 BindAddress, 34 CreateIPSet, 1 EnsureInterface, 2 RestoreIptables, 4 SetSysctl"
    )
    # kube-proxy's sysctls are part of the plan (the empty kernel state has none of them).
    assert lines[1:5] == [
        "~ set sysctl net.ipv4.vs.conntrack (absent) -> 1",
        "~ set sysctl net.ipv4.vs.expire_nodest_conn (absent) -> 1",
        "~ set sysctl net.ipv4.vs.expire_quiescent_template (absent) -> 1",
        "~ set sysctl net.ipv4.ip_forward (absent) -> 1",
    ]


def test_json_output_counts_the_same_operations() -> None:
    args = ["sync", "--once", "--dry-run", "--source", EXAMPLE, "--output", "json"]
    result = CliRunner().invoke(main, [*args, "--hostname-override", "node-a"])
    assert result.exit_code == 0
    plan = json.loads(result.output)
    assert plan["counts"] == {
        "AddIPSetEntries": 8,
        "AddRealServer": 14,
        "AddVirtualServer": 8,
        "BindAddress": 4,
        "CreateIPSet": 34,
        "EnsureInterface": 1,
        "RestoreIptables": 2,
        "SetSysctl": 4,
    }


EXAMPLE = "examples/cluster.yaml"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["sync", "--dry-run", "--source", EXAMPLE], "sync needs --once"),
        (
            ["sync", "--once", "--dry-run", "--kubeconfig", "/nonexistent/kubeconfig"],
            "kubeconfig /nonexistent/kubeconfig: no such file",
        ),
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


def _sync(*args: str) -> list[str]:
    return ["sync", "--once", "--dry-run", "--source", EXAMPLE, "--output", "json", *args]


def test_config_file_settings_reach_the_plan(tmp_path: Path) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text(
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"
        "hostnameOverride: node-a\nipvs:\n  scheduler: wlc\n"
    )
    result = CliRunner().invoke(main, _sync("--config", str(config)))
    assert result.exit_code == 0, result.output
    texts = [op["text"] for op in json.loads(result.stdout)["operations"]]
    assert "add virtual server UDP 10.96.0.10:53 wlc" in texts


def test_flags_the_config_file_overrides_are_named_in_a_warning(tmp_path: Path) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text(
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"
    )
    args = _sync("--config", str(config), "--ipvs-scheduler", "wlc", "--hostname-override", "a")
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0
    assert result.stderr == (
        "ipvsproxy: warning: --ipvs-scheduler is ignored because --config is given,"
        " as kube-proxy does\n"
    )
    texts = [op["text"] for op in json.loads(result.stdout)["operations"]]
    assert "add virtual server UDP 10.96.0.10:53 rr" in texts


EXAMPLE = "examples/cluster.yaml"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cluster-cidr", "10.0.0.0/33"], "ipvsproxy: --cluster-cidr 10.0.0.0/33: not a CIDR"),
        (["--ipvs-exclude-cidrs", "x"], "ipvsproxy: --ipvs-exclude-cidrs x: not a CIDR"),
        (["--config", "/nonexistent.yaml"], "ipvsproxy: --config /nonexistent.yaml: No such file"),
        (["--masquerade-all=maybe"], "'maybe' is not a valid boolean"),
        (
            ["--ipvs-tcp-timeout", "99999999999h"],
            "ipvsproxy: --ipvs-tcp-timeout '99999999999h': at most 596h31m23s",
        ),
    ],
)
def test_bad_proxy_flags_exit_2_in_one_line(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, _sync(*args))
    assert result.exit_code == 2
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], Settings()),
        (["--masquerade-all", "--ipvs-strict-arp"], Settings(masquerade_all=True, strict_arp=True)),
        (["--masquerade-all=false", "--ipvs-strict-arp=true"], Settings(strict_arp=True)),
        (
            ["--cluster-cidr", "10.244.0.0/16,fd00::/56", "--ipvs-exclude-cidrs", "10.9.0.0/16"],
            Settings(
                cluster_cidr=(ip_network("10.244.0.0/16"), ip_network("fd00::/56")),
                exclude_cidrs=(ip_network("10.9.0.0/16"),),
            ),
        ),
        (
            ["--nodeport-addresses", "192.168.0.0/16", "--ipvs-scheduler", "sh"],
            Settings(scheduler="sh", nodeport_addresses=(ip_network("192.168.0.0/16"),)),
        ),
    ],
)
def test_flags_reach_translate_as_settings(
    monkeypatch: pytest.MonkeyPatch, args: list[str], expected: Settings
) -> None:
    seen: list[Settings] = []

    def recording(snapshot: ClusterSnapshot, settings: Settings) -> DesiredState:
        seen.append(settings)
        return translate(snapshot, settings)

    monkeypatch.setattr(cli, "translate", recording)
    result = CliRunner().invoke(main, _sync(*args))
    assert result.exit_code == 0, result.output
    assert seen == [expected]


def test_sync_without_ipvs_exits_2_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "require_net_admin", lambda: None)
    result = CliRunner().invoke(main, ["sync", "--once", "--source", EXAMPLE])
    assert result.exit_code == 2
    assert result.output == NO_IPVS


def test_sync_with_a_scheduler_the_kernel_refuses_exits_2_naming_its_module(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeKernel()
    fake.ipvs = FakeIPVS(schedulers={"rr"})
    monkeypatch.setattr(cli, "require_net_admin", lambda: None)
    monkeypatch.setattr(cli, "real_kernel", lambda: _fake_kernel(fake))
    args = ["sync", "--once", "--source", EXAMPLE, "--ipvs-scheduler", "wlc"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert result.output == (
        "ipvsproxy: the kernel refuses IPVS scheduler 'wlc' (No such file or directory); "
        "load its module (modprobe ip_vs_wlc) or choose another with --ipvs-scheduler\n"
    )
    assert fake.ipvs.dump() == {}


def test_cleanup_without_net_admin_exits_2_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(preconditions, "effective_capabilities", lambda *_: 0)
    result = CliRunner().invoke(main, ["cleanup"])
    assert result.exit_code == 2
    assert result.output == (
        "ipvsproxy: ipvsproxy needs CAP_NET_ADMIN (run as root or grant it) to program IPVS\n"
    )


def test_no_command_prints_the_help_unprefixed() -> None:
    result = CliRunner().invoke(main, [])
    assert result.exit_code == 2
    assert result.output.startswith("Usage: ")
    assert "  sync " in result.output
