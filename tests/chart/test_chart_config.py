"""The ConfigMap's KubeProxyConfiguration is what ipvsproxy's own config reader accepts."""

from __future__ import annotations

import json
from ipaddress import ip_network
from pathlib import Path
from typing import Any

import pytest
import yaml

from ipvsproxy.config import API_VERSION, KIND, ProxyConfig, resolve
from ipvsproxy.model import SCHEDULERS
from ipvsproxy.translate.settings import LocalDetectMode
from tests.chart.chart_kit import CHART, config_files, proxy_config, proxy_container, render


def _resolved(values: dict[str, Any], tmp_path: Path) -> ProxyConfig:
    config_file = tmp_path / "config.yaml"
    config_file.write_text(config_files(render(values))["config.yaml"])
    resolved = resolve({}, [], config_file)
    # Fields ipvsproxy does not know would be warned about; the chart writes none of those.
    assert [w for w in resolved.warnings if "unknown field" in w] == []
    return resolved.config


def test_defaults_are_kube_proxys(tmp_path: Path) -> None:
    document = proxy_config(render())
    assert (document["apiVersion"], document["kind"], document["mode"]) == (
        API_VERSION,
        KIND,
        "ipvs",
    )
    config = _resolved({}, tmp_path)
    assert config.settings.scheduler == "rr"
    assert config.healthz_bind_address == "0.0.0.0:10256"
    assert config.metrics_bind_address == "127.0.0.1:10249"
    assert (config.sync_period, config.min_sync_period) == (30.0, 1.0)
    assert config.kubeconfig is None


def test_every_ipvs_and_proxy_value_reaches_the_config(tmp_path: Path) -> None:
    values = {
        "ipvs": {"scheduler": "sh", "strictARP": True, "excludeCIDRs": ["10.9.0.0/16"],
                 "syncPeriod": "1m30s", "minSyncPeriod": "2s"},
        "masqueradeAll": True,
        "clusterCIDR": "10.244.0.0/16,fd00:10:244::/56",
        "nodePortAddresses": ["192.0.2.0/24"],
        "detectLocalMode": "BridgeInterface",
        "detectLocal": {"bridgeInterface": "cbr0"},
        "healthz": {"bindAddress": "::", "port": 20256},
        "metrics": {"bindAddress": "0.0.0.0", "port": 20249},
    }  # fmt: skip
    config = _resolved(values, tmp_path)
    settings = config.settings
    assert settings.scheduler == "sh"
    assert settings.strict_arp is True
    assert settings.exclude_cidrs == (ip_network("10.9.0.0/16"),)
    assert settings.masquerade_all is True
    assert settings.cluster_cidr == (ip_network("10.244.0.0/16"), ip_network("fd00:10:244::/56"))
    assert settings.nodeport_addresses == (ip_network("192.0.2.0/24"),)
    assert settings.detect_local_mode is LocalDetectMode.BRIDGE_INTERFACE
    assert settings.bridge_interface == "cbr0"
    assert (config.sync_period, config.min_sync_period) == (90.0, 2.0)
    assert config.healthz_bind_address == "[::]:20256"
    assert config.metrics_bind_address == "0.0.0.0:20249"


def test_timeouts_masquerade_bit_and_conntrack_reach_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What --config makes extraArgs unable to set has values of its own."""
    monkeypatch.setattr("ipvsproxy.config.node_cpus", lambda: 8)
    values = {
        "ipvs": {"tcpTimeout": "15m", "tcpFinTimeout": "2m", "udpTimeout": "5m"},
        "masqueradeBit": 13,
        "conntrack": {"maxPerCore": 65536, "min": 100000, "tcpEstablishedTimeout": "2h",
                      "tcpCloseWaitTimeout": "30m", "tcpBeLiberal": True, "udpTimeout": "30s",
                      "udpStreamTimeout": "2m"},
    }  # fmt: skip
    config = _resolved(values, tmp_path)
    assert (config.ipvs_timeouts.tcp, config.ipvs_timeouts.tcp_fin) == (900, 120)
    assert config.ipvs_timeouts.udp == 300
    assert config.settings.masquerade_bit == 13
    conntrack = config.conntrack
    assert conntrack.max == 8 * 65536
    assert (conntrack.tcp_established, conntrack.tcp_close_wait) == (7200, 1800)
    assert conntrack.tcp_be_liberal is True
    assert (conntrack.udp, conntrack.udp_stream) == (30, 120)


def test_conntrack_defaults_are_kube_proxys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("ipvsproxy.config.node_cpus", lambda: 2)
    conntrack = _resolved({}, tmp_path).conntrack
    # 32768 per core on 2 cores is below kube-proxy's minimum of 131072.
    assert conntrack.max == 131072
    assert (conntrack.tcp_established, conntrack.tcp_close_wait) == (86400, 3600)
    assert not conntrack.tcp_be_liberal and conntrack.udp == conntrack.udp_stream == 0


def test_the_logging_format_is_in_the_file() -> None:
    assert proxy_config(render({"logging": {"format": "json"}}))["logging"] == {"format": "json"}


def test_api_server_gives_a_kubeconfig_with_the_service_account_credentials(
    tmp_path: Path,
) -> None:
    objects = render({"apiServer": "https://192.0.2.10:6443"})
    config = _resolved({"apiServer": "https://192.0.2.10:6443"}, tmp_path)
    assert config.kubeconfig is not None
    kubeconfig_name = config.kubeconfig.name
    mount = next(m for m in proxy_container(objects)["volumeMounts"] if m["name"] == "config")
    assert config.kubeconfig == Path(mount["mountPath"]) / kubeconfig_name
    kubeconfig = yaml.safe_load(config_files(objects)[kubeconfig_name])
    (cluster,) = kubeconfig["clusters"]
    (user,) = kubeconfig["users"]
    account = "/var/run/secrets/kubernetes.io/serviceaccount"
    assert cluster["cluster"] == {"server": "https://192.0.2.10:6443",
                                  "certificate-authority": f"{account}/ca.crt"}  # fmt: skip
    assert user["user"] == {"tokenFile": f"{account}/token"}
    assert kubeconfig["current-context"] in {c["name"] for c in kubeconfig["contexts"]}


def test_the_schema_knows_exactly_the_schedulers_ipvsproxy_knows() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert set(schema["properties"]["ipvs"]["properties"]["scheduler"]["enum"]) == SCHEDULERS


@pytest.mark.parametrize("scheduler", sorted(SCHEDULERS))
def test_every_scheduler_renders_into_a_config_ipvsproxy_accepts(
    scheduler: str, tmp_path: Path
) -> None:
    assert _resolved({"ipvs": {"scheduler": scheduler}}, tmp_path).settings.scheduler == scheduler
