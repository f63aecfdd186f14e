"""kube-proxy's own configuration file, as the real kube-proxy v1.37.2 writes it with every
field defaulted (``--write-config-to``), is read whole: no field is dropped unnamed, and the
conntrack settings come out as kube-proxy applies them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ipvsproxy.config import resolve


@pytest.fixture
def written_by_kube_proxy(controlplane_binaries: Path, tmp_path: Path) -> Path:
    path = tmp_path / "config.conf"
    subprocess.run(
        [controlplane_binaries / "kube-proxy", "--proxy-mode=ipvs", f"--write-config-to={path}"],
        capture_output=True,
        check=True,
        timeout=60,
    )
    return path


def test_every_field_kube_proxy_writes_is_read_or_knowingly_left(
    written_by_kube_proxy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("ipvsproxy.config.node_cpus", lambda: 8)
    resolved = resolve({}, [], written_by_kube_proxy)
    assert resolved.warnings == ()
    config = resolved.config
    # kube-proxy's defaults: 32768 per core on 8 cores, above the minimum of 131072.
    assert config.conntrack.max == 8 * 32768
    assert (config.conntrack.tcp_established, config.conntrack.tcp_close_wait) == (86400, 3600)
    assert config.settings.scheduler == "rr"
    assert config.settings.masquerade_bit == 14
    assert (config.sync_period, config.min_sync_period) == (30.0, 1.0)
