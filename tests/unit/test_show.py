from __future__ import annotations

import http.client
import ipaddress
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from ipvsproxy import cli
from ipvsproxy.cli import main
from ipvsproxy.cluster.source import load_snapshot
from ipvsproxy.daemon.daemon import Daemon, DaemonOptions
from ipvsproxy.kernel.errors import IPVSUnavailable
from ipvsproxy.kernel.protocols import Kernel
from ipvsproxy.kernel.testing import FakeIPVS, FakeKernel
from ipvsproxy.model import (
    AddRealServer,
    AddVirtualServer,
    DesiredState,
    IPVSTable,
    ObjectKey,
    RealServer,
    RealServerKey,
    TrafficStats,
    TransportProtocol,
    UpdateRealServer,
    VirtualServer,
    VirtualServerKey,
    VirtualServerState,
)
from ipvsproxy.owners import owners_of
from ipvsproxy.reconcile.ipvs_plan import owned_addresses, plan_ipvs
from ipvsproxy.show import build_view, view_json, view_text
from ipvsproxy.translate import Settings, translate

EXAMPLE = Path("examples/cluster.yaml")
DNS = VirtualServerKey(TransportProtocol.UDP, ipaddress.ip_address("10.96.0.10"), 53)
DNS_POD = RealServerKey(ipaddress.ip_address("10.244.0.5"), 53)
GONE_POD = RealServerKey(ipaddress.ip_address("10.244.9.9"), 53)
FOREIGN = VirtualServerKey(TransportProtocol.TCP, ipaddress.ip_address("172.16.0.1"), 8080)


def _desired() -> DesiredState:
    snapshot, _ = load_snapshot(EXAMPLE, "node-a")
    return translate(snapshot, Settings())


def _kernel_table(desired: DesiredState) -> IPVSTable:
    """The example applied to a fake kernel, one leaving pod at weight 0, a foreign service."""
    ipvs = FakeIPVS()
    ipvs.apply(plan_ipvs(desired, {}, owned_addresses(desired, ())).ops)
    results = ipvs.apply(
        [
            AddRealServer(DNS, RealServer(GONE_POD, weight=0)),
            UpdateRealServer(DNS, RealServer(DNS_POD, weight=0)),
            AddVirtualServer(VirtualServer(FOREIGN, scheduler="wlc")),
        ]
    )
    assert results == [None, None, None]
    table = dict(ipvs.dump())
    dns = table[DNS]
    counted = replace(
        dns.real_servers[GONE_POD],
        active_connections=0,
        inactive_connections=3,
        stats=TrafficStats(
            connections=7, packets_in=14, packets_out=12, bytes_in=900, bytes_out=1500
        ),
    )
    table[DNS] = replace(
        dns,
        real_servers={**dns.real_servers, GONE_POD: counted},
        stats=TrafficStats(connections=9),
    )
    return table


def test_service_ports_are_named_and_foreign_virtual_servers_listed_last() -> None:
    desired = _desired()
    view = build_view(_kernel_table(desired), owners_of(desired))
    owners = [str(port.owner) if port.owner else None for port in view]
    assert owners == [
        "kube-system/kube-dns:dns",
        "kube-system/kube-dns:dns-tcp",
        "kube-system/kube-dns:metrics",
        "shop/gateway:https",
        "shop/web:http",
        None,
    ]
    assert [row.state.server.key for row in view[-1].virtual_servers] == [FOREIGN]
    gateway = [str(row.state.server.key) for row in view[3].virtual_servers]
    assert gateway == ["TCP 10.96.40.1:443", "TCP 192.168.10.11:31443", "TCP 203.0.113.10:443"]


def test_weight_zero_is_draining_only_when_the_endpoint_is_no_longer_wanted() -> None:
    desired = _desired()
    (dns,) = build_view(
        _kernel_table(desired), owners_of(desired), ObjectKey("kube-system", "kube-dns")
    )[0].virtual_servers
    draining = {str(row.state.server.key): row.draining for row in dns.real_servers}
    # 10.244.0.5 is wanted (weight 0 is a drift the next sync repairs), 10.244.9.9 is not.
    assert draining == {"10.244.0.5:53": False, "10.244.1.7:53": False, "10.244.9.9:53": True}


def test_filter_keeps_one_service_and_drops_unowned() -> None:
    desired = _desired()
    view = build_view(_kernel_table(desired), owners_of(desired), ObjectKey("shop", "web"))
    assert [str(port.owner) for port in view] == ["shop/web:http"]
    assert build_view(_kernel_table(desired), owners_of(desired), ObjectKey("shop", "absent")) == []


def test_kernel_alone_has_no_names_and_weight_zero_counts_as_draining() -> None:
    view = build_view(_kernel_table(_desired()))
    assert [port.owner for port in view] == [None]
    assert len(view[0].virtual_servers) == 9
    assert all(row.kind is None for row in view[0].virtual_servers)
    reals = [real for row in view[0].virtual_servers for real in row.real_servers]
    assert sum(real.draining for real in reals) == 2


def test_text_table_shows_counters_and_draining() -> None:
    desired = _desired()
    text = view_text(build_view(_kernel_table(desired), owners_of(desired)))
    lines = text.splitlines()
    assert lines[0].split() == [
        "SERVICE", "PORT", "KIND", "VIRTUAL", "SERVER", "SCHEDULER", "REAL", "SERVER",
        "WEIGHT", "ACTIVE", "INACTIVE", "CONNECTIONS", "PACKETS", "IN/OUT", "BYTES", "IN/OUT",
        "STATE",
    ]  # fmt: skip
    assert lines[1].split() == [
        "kube-system/kube-dns:dns", "ClusterIP", "UDP", "10.96.0.10:53", "rr",
        "10.244.0.5:53", "0", "0", "0", "0", "0/0", "0/0",
    ]  # fmt: skip
    assert lines[3].split() == [
        "10.244.9.9:53",
        "0",
        "0",
        "3",
        "7",
        "14/12",
        "900/1500",
        "draining",
    ]
    assert lines[-2].split() == [
        "-", "-", "TCP", "172.16.0.1:8080", "wlc", "-", "0", "0/0", "0/0", "no", "endpoints",
    ]  # fmt: skip
    assert lines[-1] == "9 virtual servers, 15 real servers (1 draining)"


def test_json_carries_every_counter() -> None:
    desired = _desired()
    document = json.loads(view_json(build_view(_kernel_table(desired), owners_of(desired))))
    dns = document[0]
    assert (dns["service"], dns["portName"]) == ("kube-system/kube-dns", "dns")
    (virtual,) = dns["virtualServers"]
    assert virtual["kind"] == "ClusterIP"
    assert virtual["stats"]["connections"] == 9
    gone = virtual["realServers"][2]
    assert gone == {
        "address": "10.244.9.9",
        "port": 53,
        "weight": 0,
        "forward": "masquerade",
        "activeConnections": 0,
        "inactiveConnections": 3,
        "persistentConnections": 0,
        "stats": {
            "connections": 7,
            "packetsIn": 14,
            "packetsOut": 12,
            "bytesIn": 900,
            "bytesOut": 1500,
        },
        "draining": True,
    }
    assert document[-1]["service"] is None


def _kernel_holding(table: IPVSTable, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeKernel()
    fake.ipvs.apply([AddVirtualServer(state.server) for state in table.values()])
    fake.ipvs.apply(
        [
            AddRealServer(key, real.server)
            for key, state in table.items()
            for real in state.real_servers.values()
        ]
    )

    @contextmanager
    def opened() -> Iterator[Kernel]:
        yield fake.kernel()

    monkeypatch.setattr(cli, "require_net_admin", lambda: None)
    monkeypatch.setattr(cli, "real_kernel", opened)


def test_show_command_names_rows_from_source(monkeypatch: pytest.MonkeyPatch) -> None:
    _kernel_holding(_kernel_table(_desired()), monkeypatch)
    args = ["show", "shop/web", "--source", str(EXAMPLE), "--hostname-override", "node-a"]
    result = CliRunner().invoke(main, [*args, "--output", "json"])
    assert result.exit_code == 0, result.output
    assert [port["portName"] for port in json.loads(result.output)] == ["http"]


def test_show_without_ipvs_exits_2_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_ipvs() -> None:
        raise IPVSUnavailable("No such file or directory")

    monkeypatch.setattr(cli, "require_net_admin", lambda: None)
    monkeypatch.setattr(cli, "real_kernel", no_ipvs)
    result = CliRunner().invoke(main, ["show"])
    assert result.exit_code == 2
    assert result.output.startswith("ipvsproxy: the kernel offers no IPVS (No such file")
    assert result.output.count("\n") == 1


@pytest.mark.parametrize("argument", ["web", "shop/", "/web", "a/b/c"])
def test_show_filter_must_be_namespace_slash_name(argument: str) -> None:
    result = CliRunner().invoke(main, ["show", argument])
    assert result.exit_code == 2
    assert result.output == f"ipvsproxy: {argument!r} is not NAMESPACE/NAME\n"


class _Reads(FakeIPVS):
    """Counts what show reads of the kernel."""

    def __init__(self) -> None:
        super().__init__()
        self.dumps = 0
        self.read: list[VirtualServerKey] = []

    def dump(self, *, real_servers: bool = True, traffic: bool = True) -> IPVSTable:
        self.dumps += 1
        return super().dump(real_servers=real_servers, traffic=traffic)

    def virtual_server(self, key: VirtualServerKey) -> VirtualServerState | None:
        self.read.append(key)
        return super().virtual_server(key)


@pytest.fixture
def proxy_here(tmp_path: Path) -> Iterator[tuple[Path, DesiredState]]:
    """A daemon that has synced the example cluster, serving /metrics on a free port; and a
    config file naming that port, as the chart's ConfigMap names 10249, and a kubeconfig (one
    that does not exist, so that reading the cluster would fail), as it does with apiServer."""
    daemon = Daemon(
        FakeKernel().kernel(), Settings(), DaemonOptions(healthz=None, metrics=("127.0.0.1", 0))
    )
    snapshot, _ = load_snapshot(EXAMPLE, "node-a")
    desired = daemon.syncer.sync(snapshot, []).desired
    daemon.serve()
    config = tmp_path / "config.yaml"
    config.write_text(
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"
        f"metricsBindAddress: 127.0.0.1:{daemon.ports[0]}\n"
        "clientConnection:\n  kubeconfig: /nonexistent/kubeconfig.conf\n"
    )
    try:
        yield config, desired
    finally:
        daemon.http.stop()


def test_show_names_rows_from_the_proxy_on_this_node_and_reads_only_its_service(
    monkeypatch: pytest.MonkeyPatch, proxy_here: tuple[Path, DesiredState]
) -> None:
    config, desired = proxy_here
    reads = _Reads()
    table = _kernel_table(desired)
    reads.apply([AddVirtualServer(state.server) for state in table.values()])
    fake = FakeKernel()
    fake.ipvs = reads

    @contextmanager
    def opened() -> Iterator[Kernel]:
        yield fake.kernel()

    monkeypatch.setattr(cli, "require_net_admin", lambda: None)
    monkeypatch.setattr(cli, "real_kernel", opened)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    result = CliRunner().invoke(
        main, ["show", "shop/web", "--config", str(config), "--output", "json"]
    )
    assert result.exit_code == 0, result.output
    assert [port["service"] for port in json.loads(result.stdout)] == ["shop/web"]
    web = {
        key for key, wanted in desired.virtual_servers.items() if wanted.owner.service.name == "web"
    }
    assert (reads.dumps, set(reads.read)) == (0, web)
    everything = CliRunner().invoke(main, ["show", "--config", str(config)])
    assert "kube-system/kube-dns:dns" in everything.stdout
    assert reads.dumps == 1


def test_without_a_proxy_or_a_cluster_show_says_why_it_names_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _kernel_holding(_kernel_table(_desired()), monkeypatch)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    config = tmp_path / "config.yaml"
    config.write_text(
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"
        "metricsBindAddress: 127.0.0.1:0\n"
    )
    result = CliRunner().invoke(main, ["show", "--config", str(config)])
    assert result.exit_code == 0
    assert result.stderr == (
        "ipvsproxy: no Service names: the proxy's metrics are off (port 0), and with them its "
        "translation\n"
    )
    assert "kube-dns" not in result.stdout
    assert result.stdout.splitlines()[-1] == "9 virtual servers, 15 real servers (2 draining)"


def test_the_daemon_answers_owners_beside_metrics(proxy_here: tuple[Path, DesiredState]) -> None:
    config, _ = proxy_here
    found = re.search(r"metricsBindAddress: 127\.0\.0\.1:(\d+)", config.read_text())
    assert found is not None
    port = int(found[1])

    def get(path: str) -> tuple[int, bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()

    status, body = get("/owners/shop/web")
    assert status == 200
    assert {entry["service"] for entry in json.loads(body)["virtualServers"]} == {"shop/web"}
    for bad in ("/owners/shop", "/owners/a/b/c", "/owners//web"):
        assert get(bad)[0] == 404
    assert get("/metrics")[0] == 200
