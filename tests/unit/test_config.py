from __future__ import annotations

import ipaddress
import socket
from pathlib import Path
from typing import Any

import pytest

from ipvsproxy.config import (
    API_VERSION,
    FIELDS,
    IGNORED_FIELDS,
    KIND,
    ConfigError,
    ProxyConfig,
    parse_duration,
    resolve,
)
from ipvsproxy.model import IPVSTimeouts
from ipvsproxy.translate.settings import LocalDetectMode
from tests.unit.test_bounded_load import LAUGHS

HEADER = f"apiVersion: {API_VERSION}\nkind: {KIND}\n"


def _file(tmp_path: Path, body: str, header: str = HEADER) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(header + body)
    return path


def _from_file(tmp_path: Path, body: str) -> ProxyConfig:
    return resolve({}, (), _file(tmp_path, body)).config


def _from_flags(**flags: Any) -> ProxyConfig:
    named = {f"--{name.replace('_', '-')}": value for name, value in flags.items()}
    return resolve(named, list(named)).config


def net(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    return ipaddress.ip_network(text)


# (file body, flags, attribute path on ProxyConfig, expected value)
FIELD_CASES: list[tuple[str, dict[str, Any], str, Any]] = [
    ("hostnameOverride: Node-A", {"hostname_override": "Node-A"}, "hostname", "node-a"),
    (
        "clientConnection:\n  kubeconfig: /etc/kube/proxy.conf",
        {"kubeconfig": "/etc/kube/proxy.conf"},
        "kubeconfig",
        Path("/etc/kube/proxy.conf"),
    ),
    (
        "clusterCIDR: 10.244.0.0/16,fd00:10:244::/56",
        {"cluster_cidr": "10.244.0.0/16,fd00:10:244::/56"},
        "settings.cluster_cidr",
        (net("10.244.0.0/16"), net("fd00:10:244::/56")),
    ),
    ("ipvs:\n  scheduler: wlc", {"ipvs_scheduler": "wlc"}, "settings.scheduler", "wlc"),
    (
        "ipvs:\n  excludeCIDRs: [192.168.0.0/16, 10.1.0.0/24]",
        {"ipvs_exclude_cidrs": "192.168.0.0/16,10.1.0.0/24"},
        "settings.exclude_cidrs",
        (net("192.168.0.0/16"), net("10.1.0.0/24")),
    ),
    ("ipvs:\n  strictARP: true", {"ipvs_strict_arp": True}, "settings.strict_arp", True),
    ("iptables:\n  masqueradeAll: true", {"masquerade_all": True}, "settings.masquerade_all", True),
    (
        "iptables:\n  masqueradeBit: 12",
        {"iptables_masquerade_bit": 12},
        "settings.masquerade_bit",
        12,
    ),
    ("ipvs:\n  tcpTimeout: 15m", {"ipvs_tcp_timeout": "15m"}, "ipvs_timeouts.tcp", 900),
    ("ipvs:\n  tcpFinTimeout: 30s", {"ipvs_tcpfin_timeout": "30s"}, "ipvs_timeouts.tcp_fin", 30),
    ("ipvs:\n  udpTimeout: 1m30.5s", {"ipvs_udp_timeout": "1m30.5s"}, "ipvs_timeouts.udp", 90),
    (
        "conntrack:\n  tcpEstablishedTimeout: 2h",
        {"conntrack_tcp_timeout_established": "2h"},
        "conntrack.tcp_established",
        7200,
    ),
    (
        "conntrack:\n  tcpCloseWaitTimeout: 0s",
        {"conntrack_tcp_timeout_close_wait": "0s"},
        "conntrack.tcp_close_wait",
        0,
    ),
    (
        "conntrack:\n  tcpBeLiberal: true",
        {"conntrack_tcp_be_liberal": True},
        "conntrack.tcp_be_liberal",
        True,
    ),
    ("conntrack:\n  udpTimeout: 30s", {"conntrack_udp_timeout": "30s"}, "conntrack.udp", 30),
    (
        "conntrack:\n  udpStreamTimeout: 2m",
        {"conntrack_udp_timeout_stream": "2m"},
        "conntrack.udp_stream",
        120,
    ),
    ("conntrack:\n  maxPerCore: 0", {"conntrack_max_per_core": 0}, "conntrack.max", 0),
    (
        "nodePortAddresses: [10.0.0.0/8]",
        {"nodeport_addresses": "10.0.0.0/8"},
        "settings.nodeport_addresses",
        (net("10.0.0.0/8"),),
    ),
    ("nodePortAddresses: [all]", {"nodeport_addresses": "all"}, "settings.nodeport_addresses", ()),
    (
        "nodePortAddresses: [primary]",
        {"nodeport_addresses": "primary"},
        "settings.nodeport_primary",
        True,
    ),
    (
        "detectLocalMode: NodeCIDR",
        {"detect_local_mode": "NodeCIDR"},
        "settings.detect_local_mode",
        LocalDetectMode.NODE_CIDR,
    ),
    (
        "detectLocal:\n  bridgeInterface: cbr0",
        {"pod_bridge_interface": "cbr0"},
        "settings.bridge_interface",
        "cbr0",
    ),
    (
        "detectLocal:\n  interfaceNamePrefix: veth",
        {"pod_interface_name_prefix": "veth"},
        "settings.interface_name_prefix",
        "veth",
    ),
]

FILE_ONLY_CASES: list[tuple[str, str, Any]] = [
    ("ipvs:\n  syncPeriod: 1m30s", "sync_period", 90.0),
    ("ipvs:\n  minSyncPeriod: 500ms", "min_sync_period", 0.5),
    ("healthzBindAddress: 127.0.0.1:10256", "healthz_bind_address", "127.0.0.1:10256"),
    ("metricsBindAddress: 0.0.0.0:10249", "metrics_bind_address", "0.0.0.0:10249"),
    ("mode: ipvs", "settings.scheduler", "rr"),
    ('mode: ""', "settings.scheduler", "rr"),
    ("detectLocalMode: ClusterCIDR", "settings.scheduler", "rr"),
    ('ipvs:\n  scheduler: ""', "settings.scheduler", "rr"),
    ("ipvs:\n  excludeCIDRs: null", "settings.exclude_cidrs", ()),
    ("ipvs:\n  syncPeriod: 0s", "sync_period", 30.0),
    ('healthzBindAddress: ""', "healthz_bind_address", "0.0.0.0:10256"),
]


def _attribute(config: ProxyConfig, path: str) -> Any:
    value: Any = config
    for name in path.split("."):
        value = getattr(value, name)
    return value


@pytest.mark.parametrize(("body", "flags", "attribute", "expected"), FIELD_CASES)
def test_each_field_reads_the_same_from_file_and_flag(
    tmp_path: Path, body: str, flags: dict[str, Any], attribute: str, expected: Any
) -> None:
    assert _attribute(_from_file(tmp_path, body), attribute) == expected
    assert _attribute(_from_flags(**flags), attribute) == expected


@pytest.mark.parametrize(("body", "attribute", "expected"), FILE_ONLY_CASES)
def test_file_only_fields(tmp_path: Path, body: str, attribute: str, expected: Any) -> None:
    assert _attribute(_from_file(tmp_path, body), attribute) == expected


def test_defaults_are_kube_proxys() -> None:
    config = resolve({}, ()).config
    assert config.settings.scheduler == "rr"
    assert config.hostname == socket.gethostname().lower()
    assert (config.sync_period, config.min_sync_period) == (30.0, 1.0)
    assert config.healthz_bind_address == "0.0.0.0:10256"
    assert config.metrics_bind_address == "127.0.0.1:10249"
    assert config.kubeconfig is None
    assert not config.settings.masquerade_all
    assert not config.settings.strict_arp
    assert config.settings.masquerade_bit == 14
    assert config.ipvs_timeouts == IPVSTimeouts(0, 0, 0)


def test_flags_not_given_explicitly_do_not_count() -> None:
    config = resolve({"--ipvs-scheduler": "wlc"}, ()).config
    assert config.settings.scheduler == "rr"


def test_hostname_override_flag_wins_over_the_file(tmp_path: Path) -> None:
    path = _file(tmp_path, "hostnameOverride: from-file\n")
    resolved = resolve({"--hostname-override": "From-Flag"}, ["--hostname-override"], path)
    assert resolved.config.hostname == "from-flag"
    assert resolved.warnings == ()


def test_other_flags_lose_to_the_file_with_a_warning(tmp_path: Path) -> None:
    path = _file(tmp_path, "ipvs:\n  scheduler: sh\n")
    flags = {"--ipvs-scheduler": "wlc", "--masquerade-all": True}
    resolved = resolve(flags, list(flags), path)
    assert resolved.config.settings.scheduler == "sh"
    assert not resolved.config.settings.masquerade_all
    assert resolved.warnings == (
        "--masquerade-all is ignored because --config is given, as kube-proxy does",
        "--ipvs-scheduler is ignored because --config is given, as kube-proxy does",
    )


def test_master_always_comes_from_the_flag(tmp_path: Path) -> None:
    assert resolve({}, (), _file(tmp_path, ""), "https://10.0.0.1:6443").config.master == (
        "https://10.0.0.1:6443"
    )


def test_unknown_fields_are_ignored_with_one_warning_each(tmp_path: Path) -> None:
    path = _file(tmp_path, "ipvs:\n  schedular: wlc\nfancy: 1\n")
    resolved = resolve({}, (), path)
    assert resolved.config.settings.scheduler == "rr"
    assert resolved.warnings == (
        f"--config {path}: unknown field 'ipvs.schedular' ignored, as kube-proxy does",
        f"--config {path}: unknown field 'fancy' ignored, as kube-proxy does",
    )


def test_fields_kube_proxy_has_and_we_do_not_use_are_accepted_silently(tmp_path: Path) -> None:
    body = (
        "bindAddress: 0.0.0.0\nfeatureGates: {SomeGate: true}\noomScoreAdj: -999\n"
        "conntrack:\n  maxPerCore: 32768\n  min: 131072\n"
        "iptables:\n  masqueradeBit: 14\n  syncPeriod: 30s\n"
        "ipvs:\n  tcpTimeout: 0s\nlogging:\n  verbosity: 2\nwinkernel: {}\n"
    )
    assert resolve({}, (), _file(tmp_path, body)).warnings == ()


def test_ignored_and_used_fields_do_not_overlap() -> None:
    assert not IGNORED_FIELDS & FIELDS.keys()


@pytest.mark.parametrize(
    ("header", "body", "message"),
    [
        (
            "apiVersion: kubeproxy.config.k8s.io/v1beta1\nkind: KubeProxyConfiguration\n",
            "",
            "apiVersion 'kubeproxy.config.k8s.io/v1beta1' is not kubeproxy.config.k8s.io/v1alpha1",
        ),
        (f"apiVersion: {API_VERSION}\nkind: KubeletConfiguration\n", "", "kind 'Kubel"),
        (f"kind: {KIND}\n", "", "apiVersion None is not"),
        ("", "- a list", "not a KubeProxyConfiguration object"),
        (
            "",
            "mode: [unclosed",
            "not valid YAML at line 2: did not find expected ',' or ']' "
            "(while parsing a flow sequence at line 1)",
        ),
        ("", "a: b\n  c: d", "not valid YAML at line 2: mapping values are not allowed"),
        (HEADER, "ipvs:\n  syncPeriod: -30s", "ipvs.syncPeriod '-30s': a duration may not be"),
        (HEADER, "ipvs:\n  minSyncPeriod: -1s", "ipvs.minSyncPeriod '-1s': a duration may not"),
        (
            HEADER,
            "detectLocalMode: BridgeInterface",
            "detectLocalMode BridgeInterface needs detectLocal.bridgeInterface",
        ),
        (
            HEADER,
            "detectLocalMode: InterfaceNamePrefix",
            "detectLocalMode InterfaceNamePrefix needs detectLocal.interfaceNamePrefix",
        ),
        (HEADER, LAUGHS, "YAML aliases expand the document far beyond its own size"),
        (HEADER, "a: " + "[" * 600 + "]" * 600, "nested deeper than 100 levels"),
        ("", "---\n" + HEADER + "---\n" + HEADER, "not a KubeProxyConfiguration object"),
        (HEADER, "mode: iptables", "mode 'iptables': ipvsproxy only implements the ipvs mode"),
        (HEADER, "ipvs:\n  strictARP: yes please", "ipvs.strictARP must be a bool"),
        (HEADER, "ipvs: fast", "ipvs must be an object"),
        (HEADER, "nodePortAddresses: 10.0.0.0/8", "nodePortAddresses must be a list"),
        (HEADER, "ipvs:\n  scheduler: fastest", "ipvs.scheduler 'fastest' is not one of"),
        (HEADER, "ipvs:\n  syncPeriod: 30", "ipvs.syncPeriod must be a duration"),
        (HEADER, "ipvs:\n  syncPeriod: 30x", "ipvs.syncPeriod '30x': not a duration"),
        (HEADER, "clusterCIDR: 10.0.0.0/33", "clusterCIDR 10.0.0.0/33: not a CIDR"),
        (HEADER, "detectLocalMode: Nearby", "detectLocalMode 'Nearby' is not one of ClusterCIDR"),
        (HEADER, "iptables:\n  masqueradeBit: true", "iptables.masqueradeBit must be a number"),
        (HEADER, "iptables:\n  masqueradeBit: 40", "masqueradeBit 40: must be within the range"),
        (HEADER, "ipvs:\n  tcpTimeout: 900", "ipvs.tcpTimeout must be a duration"),
        (HEADER, "conntrack:\n  maxPerCore: -1", "conntrack.maxPerCore -1: must be within"),
        (HEADER, "conntrack:\n  min: 2147483648", "conntrack.min 2147483648: must be within"),
        (HEADER, "conntrack:\n  udpTimeout: -1s", "conntrack.udpTimeout '-1s': a duration may"),
        (HEADER, "conntrack:\n  tcpBeLiberal: 1", "conntrack.tcpBeLiberal must be a bool"),
    ],
)
def test_bad_files_fail_in_one_line_naming_the_field(
    tmp_path: Path, header: str, body: str, message: str
) -> None:
    path = _file(tmp_path, body, header)
    with pytest.raises(ConfigError) as raised:
        resolve({}, (), path)
    assert str(raised.value).startswith(f"--config {path}: ")
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("cpus", "per_core", "floor", "expected"),
    [
        (2, 32768, 131072, 131072),  # kube-proxy's defaults on a small node: the minimum
        (8, 32768, 131072, 262144),
        (64, 32768, 131072, 1 << 20),  # capped, as kube-proxy caps it
        (8, 0, 131072, 0),  # maxPerCore 0 leaves the limit, minimum included
    ],
)
def test_conntrack_max_is_kube_proxys_per_core_figure(
    monkeypatch: pytest.MonkeyPatch, cpus: int, per_core: int, floor: int, expected: int
) -> None:
    monkeypatch.setattr("ipvsproxy.config.node_cpus", lambda: cpus)
    config = _from_flags(conntrack_max_per_core=per_core, conntrack_min=floor)
    assert config.conntrack.max == expected


def test_conntrack_defaults_are_kube_proxys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ipvsproxy.config.node_cpus", lambda: 4)
    conntrack = _from_flags().conntrack
    assert (conntrack.max, conntrack.tcp_established, conntrack.tcp_close_wait) == (
        131072,
        86400,
        3600,
    )


def test_a_missing_file_fails_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="No such file or directory"):
        resolve({}, (), tmp_path / "absent.yaml")


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--cluster-cidr", "10.0.0.0/33", "--cluster-cidr 10.0.0.0/33: not a CIDR"),
        ("--cluster-cidr", "10.0.0.1", "--cluster-cidr 10.0.0.1: not a CIDR"),
        (
            "--cluster-cidr",
            "10.0.0.0/8,10.1.0.0/16",
            "--cluster-cidr 10.0.0.0/8,10.1.0.0/16: at most one CIDR per IP family",
        ),
        ("--ipvs-exclude-cidrs", "10.0.0.0/8,bogus", "--ipvs-exclude-cidrs bogus: not a CIDR"),
        (
            "--nodeport-addresses",
            "primary,10.0.0.0/8",
            "--nodeport-addresses primary,10.0.0.0/8: 'primary': can't use both",
        ),
        ("--ipvs-scheduler", "x", "--ipvs-scheduler 'x' is not one of"),
        ("--hostname-override", "  ", "--hostname-override '  ': an empty name is invalid"),
        ("--iptables-masquerade-bit", 32, "--iptables-masquerade-bit 32: must be within the"),
        ("--iptables-masquerade-bit", -1, "--iptables-masquerade-bit -1: must be within the"),
        ("--ipvs-udp-timeout", "-5s", "--ipvs-udp-timeout '-5s': a duration may not be negative"),
        ("--ipvs-tcp-timeout", "15", "--ipvs-tcp-timeout '15': not a duration"),
        (
            "--detect-local-mode",
            "BridgeInterface",
            "--detect-local-mode BridgeInterface needs --pod-bridge-interface",
        ),
        (
            "--detect-local-mode",
            "InterfaceNamePrefix",
            "--detect-local-mode InterfaceNamePrefix needs --pod-interface-name-prefix",
        ),
        ("--service-external-ip-range", "203.0.113.7", "--service-external-ip-range 203.0.113.7"),
        ("--api-timeout", "-5s", "--api-timeout '-5s': must be positive"),
        ("--api-timeout", "soon", "--api-timeout 'soon': not a duration"),
        (
            "--hostname-override",
            "node-a\nskipped Service x/y: forged",
            "--hostname-override 'node-a\\nskipped Service x/y: forged': not a node name",
        ),
        ("--hostname-override", "node_a", "--hostname-override 'node_a': not a node name"),
        ("--hostname-override", "a" * 254, "--hostname-override 'aaaa"),
        (
            "--service-node-port-range",
            "32767-30000",
            "--service-node-port-range '32767-30000': the",
        ),
        ("--service-node-port-range", "0-100", "--service-node-port-range '0-100': ports are"),
        ("--service-node-port-range", "1-65536", "--service-node-port-range '1-65536': ports are"),
        ("--service-node-port-range", "30000-", "--service-node-port-range '30000-': not a port"),
        ("--service-node-port-range", "-1-5", "--service-node-port-range '-1-5': not a port"),
        ("--service-node-port-range", "1_000-2000", "--service-node-port-range '1_000-2000'"),
        ("--service-node-port-range", "", "--service-node-port-range '': not a port range"),
        ("--healthz-bind-address", "localhost", "--healthz-bind-address: 'localhost' is not"),
        ("--metrics-bind-address", "1.2.3.4:99999", "--metrics-bind-address: '1.2.3.4:99999'"),
    ],
)
def test_bad_flags_fail_in_one_line_naming_the_flag(flag: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        resolve({flag: value}, [flag])
    assert str(raised.value).startswith(message)


def test_own_flags_apply_even_with_a_config_file(tmp_path: Path) -> None:
    flags = {"--service-external-ip-range": ("203.0.113.0/24", "198.51.100.0/24,2001:db8::/64")}
    config = resolve({**flags, "--api-timeout": "5s"}, [], _file(tmp_path, "")).config
    assert config.settings.external_ip_ranges == (
        net("203.0.113.0/24"),
        net("198.51.100.0/24"),
        net("2001:db8::/64"),
    )
    assert config.api_timeout == 5.0


def test_the_node_port_range_applies_even_with_a_config_file(tmp_path: Path) -> None:
    flags = {"--service-node-port-range": "20000-22767"}
    assert resolve(flags, [], _file(tmp_path, "")).config.settings.node_port_range == (20000, 22767)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("30000-32767", (30000, 32767)), ("30000+767", (30000, 30767)), ("8080", (8080, 8080))],
)
def test_node_port_ranges_in_kube_apiservers_forms(text: str, expected: tuple[int, int]) -> None:
    assert _from_flags(service_node_port_range=text).settings.node_port_range == expected


def test_the_node_port_range_defaults_to_kube_apiservers() -> None:
    assert _from_flags().settings.node_port_range == (30000, 32767)


def test_the_nodes_own_ports_are_the_kubelets_and_the_ones_we_serve(tmp_path: Path) -> None:
    flags = _from_flags(healthz_bind_address="0.0.0.0:12345", metrics_bind_address="[::1]:0")
    assert flags.settings.own_ports == {10250, 12345}
    body = "healthzBindAddress: 127.0.0.1:10256\nmetricsBindAddress: 0.0.0.0:9101\n"
    assert _from_file(tmp_path, body).settings.own_ports == {10250, 10256, 9101}


def test_a_node_name_from_the_environment_is_checked_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", " Node-B ")
    assert _from_flags().hostname == "node-b"
    monkeypatch.setenv("NODE_NAME", "node-b\nforged")
    with pytest.raises(ConfigError, match=r"^\$NODE_NAME 'node-b\\nforged': not a node name"):
        _from_flags()


def test_a_host_name_that_is_no_node_name_is_named_for_the_commands_that_need_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    monkeypatch.setattr(socket, "gethostname", lambda: "build_host")
    assert _from_flags().hostname_problem.startswith("the host name 'build_host': not a node name")
    monkeypatch.setattr(socket, "gethostname", lambda: "Node-A")
    config = _from_flags()
    assert (config.hostname, config.hostname_problem) == ("node-a", "")


def test_a_node_name_from_the_file_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"hostnameOverride 'a b': not a node name"):
        _from_file(tmp_path, "hostnameOverride: a b\n")


def test_api_timeout_defaults_to_at_most_a_minute() -> None:
    assert 0 < _from_flags().api_timeout <= 60


def test_cidrs_with_host_bits_are_accepted_as_kube_proxy_does() -> None:
    config = _from_flags(cluster_cidr="10.244.1.7/16")
    assert config.settings.cluster_cidr == (net("10.244.0.0/16"),)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0", 0.0), ("30s", 30.0), ("1h2m3s", 3723.0), ("1.5s", 1.5), ("250ms", 0.25), ("-1m", -60.0)],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "30", "s", "1d", "1s2", "1 s"])
def test_not_go_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


# -- durations within stated bounds --------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        (
            "--ipvs-tcp-timeout",
            "99999999999h",
            "--ipvs-tcp-timeout '99999999999h': at most 596h31m23s (2147483 s, the kernel's",
        ),
        ("--ipvs-tcpfin-timeout", "596h31m24s", "--ipvs-tcpfin-timeout '596h31m24s': at most"),
        ("--ipvs-udp-timeout", "1" + "0" * 400 + "s", "--ipvs-udp-timeout '1000"),
        ("--ipvs-sync-period", "3000000h", "--ipvs-sync-period '3000000h': at most 24h"),
        ("--ipvs-min-sync-period", "24h0m1s", "--ipvs-min-sync-period '24h0m1s': at most 24h"),
        ("--api-timeout", "25h", "--api-timeout '25h': at most 24h"),
        ("--api-timeout", "0s", "--api-timeout '0s': must be positive"),
    ],
)
def test_durations_beyond_their_bounds_fail_in_one_line(
    flag: str, value: str, message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        resolve({flag: value}, [flag])
    assert str(raised.value).startswith(message)
    assert "\n" not in str(raised.value)


def test_durations_at_their_bounds_are_accepted() -> None:
    config = _from_flags(
        ipvs_tcp_timeout="596h31m23s",
        ipvs_tcpfin_timeout="2147483s",
        ipvs_udp_timeout="0s",
        ipvs_sync_period="24h",
        ipvs_min_sync_period="24h",
        api_timeout="24h",
    )
    assert config.ipvs_timeouts == IPVSTimeouts(tcp=2147483, tcp_fin=2147483, udp=0)
    assert config.sync_period == config.min_sync_period == config.api_timeout == 86400.0


def test_the_minimum_sync_period_may_not_exceed_the_sync_period_as_in_kube_proxy() -> None:
    with pytest.raises(ConfigError) as raised:
        _from_flags(ipvs_sync_period="10s", ipvs_min_sync_period="11s")
    assert str(raised.value) == (
        "--ipvs-min-sync-period '11s': longer than --ipvs-sync-period '10s', as kube-proxy refuses"
    )
    # A zero sync period is the default one, 30s, which a minimum of 20s is not longer than.
    assert _from_flags(ipvs_sync_period="0s", ipvs_min_sync_period="20s").min_sync_period == 20


def test_a_config_file_duration_beyond_its_bound_names_the_field(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        _from_file(tmp_path, "ipvs:\n  udpTimeout: 99999999999h")
    assert str(raised.value) == (
        f"--config {tmp_path / 'config.yaml'}: ipvs.udpTimeout '99999999999h': "
        "at most 596h31m23s (2147483 s, the kernel's limit)"
    )
