"""The chart's default pod writes the sysctls its unprivileged proxy cannot, on the lab kernel.

Its proxy container runs as the container runtime would start it under the chart's
securityContext (NET_ADMIN, NET_RAW, SYS_MODULE and nothing else; /proc/sys read-only, in a
mount namespace of its own); its init container runs privileged, as the chart asks. The lab's
kube-proxy sysctls start at the kernel's own values (0), and:

1. the proxy alone cannot write them: each is refused once, named in its log, counted in
   /metrics, held in quarantine (conntrack's too, where nf_conntrack is loaded), its syncs
   count as refused, not failed, and a change after that is applied incrementally all the
   same;
2. the init container's `ipvsproxy run --init-only` sets them and exits 0;
3. the proxy started again finds nothing to write, and its /metrics carries every metric the
   chart's alerts and dashboard read.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ipvsproxy.kernel.sysctl import ProcSysctl
from ipvsproxy.reconcile.parameters import KERNEL_RELEASE, READ
from tests.api.fake_apiserver import FakeApiServer
from tests.chart.chart_kit import Manifest, config_files, init_containers, proxy_container, render
from tests.chart.observability_kit import exported_names, names_in_chart
from tests.lab.chart_pod import (
    READY_WITHIN,
    as_the_kubelet_starts_it,
    get,
    in_its_sandbox,
    wait_for,
)
from tests.lab.netns import sh

# The sysctls kube-proxy's IPVS mode needs on a 6.1 kernel (conn_reuse_mode is left as it is).
NEEDED = (
    "net.ipv4.vs.conntrack",
    "net.ipv4.vs.expire_nodest_conn",
    "net.ipv4.vs.expire_quiescent_template",
    "net.ipv4.ip_forward",
)
METRICS = "http://127.0.0.1:10249/metrics"
EROFS = {"kind": "sysctl", "reason": "EROFS"}
NEW_SERVICE_IP = "10.96.0.81"


def _sample(metrics: str, name: str, **labels: str) -> float:
    """One sample's value in a scrape, 0 when it is not there."""
    wanted = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
    series = f"{name}{{{wanted}}}" if labels else name
    found = re.search(rf"^{re.escape(series)} (\S+)$", metrics, re.MULTILINE)
    return float(found[1]) if found else 0.0


def _scrape() -> str:
    try:
        status, text = get(METRICS)
    except OSError:
        return ""
    return text if status == 200 else ""


def _scraped(name: str, **labels: str) -> float:
    """One sample's value in a scrape made now."""
    return _sample(_scrape(), name, **labels)


@contextmanager
def _running(command: list[str], env: dict[str, str], log: Path) -> Iterator[None]:
    with log.open("w") as output:
        proxy = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT)
        try:
            yield
            proxy.send_signal(signal.SIGTERM)
            assert proxy.wait(timeout=60) == 0, log.read_text()
        finally:
            if proxy.poll() is None:
                proxy.kill()
                proxy.wait()


def _started(
    container: Manifest, objects: list[Manifest], folder: Path
) -> tuple[list[str], dict[str, str]]:
    """The container's command line in its sandbox, and its environment."""
    folder.mkdir()
    command, env = as_the_kubelet_starts_it(container, config_files(objects), folder)
    return in_its_sandbox(command, container["securityContext"]), env


def _service(address: str) -> dict[str, Any]:
    return {
        "kind": "Service",
        "metadata": {"name": "api", "namespace": "default"},
        "spec": {
            "type": "ClusterIP",
            "clusterIP": address,
            "clusterIPs": [address],
            "ipFamilies": ["IPv4"],
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}],
        },
    }


def test_the_default_pod_sets_the_sysctls_its_unprivileged_proxy_cannot(
    apiserver: FakeApiServer, service_account_token: None, tmp_path: Path
) -> None:
    objects = render({"apiServer": apiserver.url})
    proxy, init = proxy_container(objects), init_containers(objects)["kernel-parameters"]
    sysctl = ProcSysctl()
    sh("ipvsadm", "-Ln")  # loads ip_vs, whose sysctls these are
    before = {name: sysctl.get(name) for name in READ if name != KERNEL_RELEASE}
    for name in NEEDED:
        sysctl.set(name, "0")
    try:
        # 1. The proxy alone: /proc/sys is read-only to it.
        log = tmp_path / "unprivileged.log"
        with _running(*_started(proxy, objects, tmp_path / "first"), log):
            wait_for(lambda: "TCP  10.96.0.80:80 rr" in sh("ipvsadm", "-Ln"), log)
            wait_for(
                lambda: _scraped("ipvsproxy_objects_in_quarantine", **EROFS) >= len(NEEDED), log
            )
            metrics = _scrape()
            held = _sample(
                metrics, "ipvsproxy_objects_in_quarantine", kind="sysctl", reason="EROFS"
            )
            counted = _sample(
                metrics, "ipvsproxy_objects_quarantined_total", kind="sysctl", reason="EROFS"
            )
            assert counted == held
            assert {name: sysctl.get(name) for name in NEEDED} == dict.fromkeys(NEEDED, "0")
            full = _sample(metrics, "ipvsproxy_syncs_total", mode="full", result="ok")
            apiserver.apply(_service(NEW_SERVICE_IP))
            wait_for(lambda: f"TCP  {NEW_SERVICE_IP}:80 rr" in sh("ipvsadm", "-Ln"), log)
            wait_for(
                lambda: _scraped("ipvsproxy_syncs_total", mode="incremental", result="ok") >= 1, log
            )
            # The refusal did not turn the next sync full (a periodic one may have come), and
            # no sync counts as failed for it.
            after = _scrape()
            assert _sample(after, "ipvsproxy_syncs_total", mode="full", result="failed") == 0
            assert _sample(after, "ipvsproxy_syncs_total", mode="full", result="refused") >= 1
            assert _sample(after, "ipvsproxy_syncs_total", mode="full", result="ok") <= full + 1
        text = log.read_text()
        for name in NEEDED:
            # Told once each, with the kernel's reason.
            refused = f"kernel refused: kernel parameter {name}: Read-only file system (EROFS)"
            assert text.count(refused) == 1, text
        assert text.count("kernel refused: ") == held

        # 2. The init container, privileged: sets them and exits 0.
        init_command, init_env = _started(init, objects, tmp_path / "init")
        done = subprocess.run(
            init_command,
            env=init_env,
            capture_output=True,
            text=True,
            timeout=READY_WITHIN,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert {name: sysctl.get(name) for name in NEEDED} == dict.fromkeys(NEEDED, "1")
        assert "kernel parameters set; exiting, as --init-only asks" in done.stderr

        # 3. The proxy again, as unprivileged as before: nothing left to refuse.
        log = tmp_path / "after-init.log"
        with _running(*_started(proxy, objects, tmp_path / "second"), log):
            wait_for(lambda: _scraped("ipvsproxy_syncs_total", mode="full", result="ok") >= 1, log)
            metrics = _scrape()
            assert "kernel refused" not in log.read_text()
            held = _sample(
                metrics, "ipvsproxy_objects_in_quarantine", kind="sysctl", reason="EROFS"
            )
            assert held == 0
            missing = {
                title: sorted(names - exported_names(metrics))
                for title, names in names_in_chart().items()
                if names - exported_names(metrics)
            }
            assert missing == {}
    finally:
        for name, value in before.items():
            if value is not None:
                sysctl.set(name, value)
        subprocess.run([sys.executable, "-m", "ipvsproxy", "cleanup"], check=False)
