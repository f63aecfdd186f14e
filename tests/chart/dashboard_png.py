"""The chart's Grafana dashboard drawn from a real scrape, for README: ``nox -s dashboard``.

Two daemons (the api tier's: in-process, on the in-memory kernel) watch a fake API server
whose cluster changes every two seconds, as an endpoint controller and users would change it;
Debian's Prometheus scrapes them every 5 s as job ``kube-proxy``. Then every panel's own
queries (Grafana's variables filled in) are asked of that Prometheus over the run, and drawn
with matplotlib in the dashboard's layout. On one node /proc/sys turns read-only, as to a pod
without the chart's init container, and sysctls are reset there: its refusals show. Not a
test: it takes about 7 minutes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from ipvsproxy.cluster.connection import connect
from ipvsproxy.model import DeleteVirtualServer
from tests.api.daemons import Daemons, Running
from tests.api.fake_apiserver import FakeApiServer
from tests.chart.observability_kit import (
    GRAFANA_VARIABLES,
    rendered,
    with_grafana_variables,
)
from tests.daemon_kit import endpoint_slice, node, service

NODES = ("node-a", "node-b")
SERVICES = 200
TICK = 2.0
SCRAPE = "5s"
STEP = 5
Row = dict[str, Any]
# What Grafana would put in, the job picked by name.
VARIABLES = {**GRAFANA_VARIABLES, "$job": "kube-proxy"}


def _prometheus_config(targets: dict[str, int]) -> str:
    static = [
        {"targets": [f"127.0.0.1:{port}"], "labels": {"instance": name}}
        for name, port in targets.items()
    ]
    scrape = {"job_name": "kube-proxy", "scrape_interval": SCRAPE, "static_configs": static}
    return json.dumps({"global": {"scrape_interval": SCRAPE}, "scrape_configs": [scrape]})


@contextmanager
def _prometheus(targets: dict[str, int], folder: Path, port: int) -> Iterator[str]:
    config = folder / "prometheus.yml"
    config.write_text(_prometheus_config(targets))
    binary = shutil.which("prometheus")
    assert binary, "prometheus is missing (Debian's prometheus package)"
    process = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={folder / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=(folder / "prometheus.log").open("w"),
    )  # fmt: skip
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(30)


def _trigger(slice_: dict[str, Any]) -> dict[str, Any]:
    """The endpoint controller's annotation: the change happened now."""
    now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    slice_["metadata"]["annotations"] = {"endpoints.kubernetes.io/last-change-trigger-time": now}
    return slice_


def _drive(fake: FakeApiServer, daemons: list[Running], minutes: float) -> None:
    """A cluster that keeps changing: endpoints move, services come and go, something edits
        the kernel behind a proxy's back, a tenant writes an invalid Service, and sysctls are reset
    on a node whose proxy may not write them."""
    ticks = int(minutes * 60 / TICK)
    for tick in range(ticks):
        index = tick % SERVICES
        fake.apply(_trigger(endpoint_slice(index, endpoints=2 + tick % 3, first=tick % 5)))
        if tick % 15 == 0:
            added = SERVICES + tick // 15
            fake.apply(service(added))
            fake.apply(_trigger(endpoint_slice(added)))
        if tick % 40 == 20:
            fake.delete("Service", "default", f"svc-{SERVICES + tick // 40}")
        if tick in (ticks // 3, 2 * ticks // 3):
            victim = daemons[1].kernel.recording.fake
            key = next(iter(victim.dump()))
            victim.apply([DeleteVirtualServer(key)])
        if tick == ticks // 2:
            fake.apply(service(9999, clusterIP="10.96.0.999"))
        if tick == ticks // 4:
            # Another agent resets sysctls on a node whose proxy sees /proc/sys read-only.
            sysctl = daemons[1].kernel.sysctl
            sysctl.read_only = True
            sysctl.values.update({"net.ipv4.ip_forward": "0", "net.ipv4.vs.conntrack": "0"})
        time.sleep(TICK)


def _query_range(prometheus: str, query: str, start: float, end: float) -> list[Row]:
    arguments = urllib.parse.urlencode({"query": query, "start": start, "end": end, "step": STEP})
    with urllib.request.urlopen(f"{prometheus}/api/v1/query_range?{arguments}") as answer:
        result: list[Row] = json.loads(answer.read())["data"]["result"]
    return result


def _legend(template: str, labels: dict[str, str]) -> str:
    text = template
    for key, value in labels.items():
        text = text.replace("{{" + key + "}}", value)
    return text or ",".join(f"{k}={v}" for k, v in labels.items()) or "value"


def _draw(dashboard: Row, prometheus: str, start: float, end: float, out: Path) -> None:
    plt.style.use("dark_background")
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in dashboard["panels"])
    # Grid rows below a header of two; each panel's plot inset for its axis labels and title.
    height = rows + 2
    figure = plt.figure(figsize=(20, height * 0.42), facecolor="#111217")
    figure.text(
        0.01, 1 - 0.8 / height,
        f"{dashboard['title']}: job=kube-proxy, 2 nodes, {SERVICES}+ services, "
        f"{(end - start) / 60:.0f} minutes, Prometheus scraping every {SCRAPE}",
        fontsize=14, va="center",
    )  # fmt: skip
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        top = (2 + grid["y"]) / height
        # (left, bottom, right, top) room: axis labels and ticks, except on a stat's number.
        left, bottom, right, above = (
            (0.005, 0.008, 0.005, 0.02) if panel["type"] == "stat" else (0.03, 0.03, 0.006, 0.02)
        )
        box = (
            grid["x"] / 24 + left,
            1 - top - grid["h"] / height + bottom,
            grid["w"] / 24 - left - right,
            grid["h"] / height - bottom - above,
        )
        axes = figure.add_axes(box, facecolor="#181b1f")
        axes.set_title(panel["title"], fontsize=9, loc="left")
        for target in panel["targets"]:
            query = with_grafana_variables(target["expr"], VARIABLES)
            series = _query_range(prometheus, query, start, end)
            if panel["type"] == "stat":
                value = float(series[0]["values"][-1][1]) if series else float("nan")
                unit = " s" if panel["fieldConfig"]["defaults"]["unit"] == "s" else ""
                axes.text(0.5, 0.4, f"{value:,.0f}{unit}", ha="center", va="center",
                          fontsize=22, color="#73bf69")  # fmt: skip
                axes.set_axis_off()
                continue
            for line in series:
                times = [(float(t) - start) / 60 for t, _ in line["values"]]
                values = [float(v) for _, v in line["values"]]
                label = _legend(target.get("legendFormat", ""), line["metric"])
                axes.plot(times, values, linewidth=1, label=label)
        if panel["type"] != "stat":
            axes.tick_params(labelsize=7)
            axes.set_xlabel("minutes", fontsize=7)
            if axes.lines:
                axes.legend(fontsize=6, loc="upper left", ncol=2, framealpha=0.3)
    figure.savefig(out, dpi=80, facecolor=figure.get_facecolor())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--minutes", type=float, default=6.0)
    parser.add_argument("--prometheus-port", type=int, default=19090)
    args = parser.parse_args()
    _, dashboard = rendered()
    with (
        tempfile.TemporaryDirectory(prefix="ipvsproxy-dashboard-") as scratch,
        FakeApiServer() as fake,
    ):
        for name in NODES:
            fake.apply(node(name))
        for index in range(SERVICES):
            fake.apply(service(index))
            fake.apply(endpoint_slice(index))
        kubeconfig = fake.write_kubeconfig(Path(scratch) / "kubeconfig")
        daemons = Daemons()
        with connect(kubeconfig) as api_a, connect(kubeconfig) as api_b:
            apis = (api_a, api_b)
            running = [daemons.start(api, name) for api, name in zip(apis, NODES, strict=True)]
            targets = {name: daemon.metrics for name, daemon in zip(NODES, running, strict=True)}
            with _prometheus(targets, Path(scratch), args.prometheus_port) as prometheus:
                start = time.time()
                _drive(fake, running, args.minutes)
                end = time.time()
                time.sleep(10)  # the last scrapes
                _draw(dashboard, prometheus, start, end, args.out)
            daemons.stop()
    print(f"dashboard: {args.out}")


if __name__ == "__main__":
    main()
