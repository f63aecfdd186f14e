"""`ipvsproxy run` as the chart's DaemonSet runs it: its command, args, env and config file.

The chart is rendered with apiServer pointing at a fake API server on the lab's loopback, so
the proxy reaches it through the kubeconfig the chart writes, with the service account token
where the kubelet puts it (the lab's own /run, a tmpfs). The ConfigMap's files go to a
temporary folder standing in for their mount path; every mention of that path (args, files)
is moved with them (tests/lab/chart_pod.py). Then the ports the chart's probes name are asked,
as the kubelet would.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from tests.api.fake_apiserver import FakeApiServer
from tests.chart.chart_kit import config_files, proxy_container, render
from tests.lab.chart_pod import SERVICE_IP, as_the_kubelet_starts_it, get, port_of, probe, wait_for
from tests.lab.netns import sh


def test_the_chart_s_daemon_container_serves_its_probes(
    apiserver: FakeApiServer, service_account_token: None, tmp_path: Path
) -> None:
    objects = render({"apiServer": apiserver.url, "metrics": {"bindAddress": "0.0.0.0"}})
    container = proxy_container(objects)
    command_line, env = as_the_kubelet_starts_it(container, config_files(objects), tmp_path)
    log_path = tmp_path / "proxy.log"
    log = log_path.open("w")
    proxy = subprocess.Popen(command_line, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        # kube-proxy's bodies: /livez the times, /healthz also whether the node takes traffic.
        alive = probe(container, "livenessProbe", proxy, log_path)
        assert {"lastUpdated", "currentTime"} <= alive.keys()
        ready = probe(container, "readinessProbe", proxy, log_path)
        assert ready["nodeEligible"] is True
        # It reached the API server through the chart's kubeconfig: the service is in the kernel.
        wait_for(lambda: f"TCP  {SERVICE_IP}:80 rr" in sh("ipvsadm", "-Ln"), log_path)
        status, metrics = get(f"http://127.0.0.1:{port_of(container, 'metrics')}/metrics")
        assert status == 200
        assert "kubeproxy_sync_proxy_rules_last_timestamp_seconds" in metrics
        proxy.send_signal(signal.SIGTERM)
        assert proxy.wait(timeout=60) == 0
    finally:
        if proxy.poll() is None:
            proxy.kill()
            proxy.wait()
        log.close()
        subprocess.run([sys.executable, "-m", "ipvsproxy", "cleanup"], check=False)
