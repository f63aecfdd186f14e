"""Turn the benchmark's raw figures into bench-results/report.{json,md} and latency.png.

``python -m bench.report --lab LAB.json --control CONTROL.json --host-load "..." --out DIR``,
or ``--peer PEER.json`` (``bench.peer``'s runs: ipvsproxy beside kube-proxy) instead of the
lab and control figures. The JSON keeps the field names other tools read (one object per size
under "sizes", keyed by the service count as a string); figures not measured are null, with
the reason in "notes".
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

DAEMON_FIELDS = ("latency_p50_ms", "latency_p99_ms", "peak_rss_mb")
DAEMON_MISSING = "not measured: daemon not available"
FIELDS = (
    "first_sync_s",
    "ipvsadm_restore_s",
    "ip_batch_s",
    "first_sync_ratio",
    "resync_writes",
    "resync_s",
    "resync_cpu_s",
    "ipvsadm_save_s",
    "latency_p50_ms",
    "latency_p99_ms",
    "translate_diff_cpu_s",
    "peak_rss_mb",
    "once_first_sync_s",
    "once_resync_s",
    "once_first_sync_ratio",
    "once_resync_ratio",
)


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def size_figures(lab: dict[str, Any], control: dict[str, Any]) -> dict[str, Any]:
    """Every named field (None where not measured), then the extra figures."""
    tools = (lab.get("ipvsadm_restore_s") or 0) + (lab.get("ip_batch_s") or 0) or None
    merged = {"failures": [], **lab, **control}
    merged["first_sync_ratio"] = _ratio(lab.get("first_sync_s"), tools)
    merged["once_first_sync_ratio"] = _ratio(lab.get("once_first_sync_s"), tools)
    # Against the ipvsadm -Sn runs taken in turns with the resyncs, where there are any.
    saves = lab.get("once_ipvsadm_save_s") or lab.get("ipvsadm_save_s")
    merged["once_resync_ratio"] = _ratio(lab.get("once_resync_s"), saves)
    merged["resync_ratio"] = _ratio(lab.get("resync_s"), lab.get("ipvsadm_save_s"))
    named = {name: merged.get(name) for name in FIELDS}
    return named | {name: value for name, value in merged.items() if name not in named}


@dataclass(frozen=True)
class Target:
    what: str
    field: str
    limit: float
    # Which sizes the target is about: the largest, or every size measured.
    sizes: Callable[[list[str]], list[str]]
    below: bool = False  # strictly below the limit, rather than at most

    def verdict(self, value: float | None) -> str:
        if value is None:
            return "not measured"
        met = value < self.limit if self.below else value <= self.limit
        if met:
            return "met"
        if self.limit == 0:
            return f"missed ({value:g}, not 0)"
        return f"missed: {value / self.limit:.1f}x the target"


def _all(sizes: list[str]) -> list[str]:
    return sizes


def _largest(sizes: list[str]) -> list[str]:
    return sizes[-1:]


TARGETS = (
    Target("sync --once first sync / (ipvsadm -R + ip -batch)", "once_first_sync_ratio", 1.5, _all),
    Target("sync --once no-op resync / ipvsadm -Sn", "once_resync_ratio", 2.0, _all),
    Target("first full sync / (ipvsadm -R + ip -batch)", "first_sync_ratio", 1.0, _all),
    Target("steady-state resync: kernel writes", "resync_writes", 0, _all),
    Target("steady-state resync / ipvsadm -Sn", "resync_ratio", 1.0, _all, below=True),
    Target("one-change latency p99, ms", "latency_p99_ms", 50.0, _largest, below=True),
    Target("latency flat: p99 at largest / smallest size", "latency_growth", 1.5, _largest),
    Target(
        "translate + diff, CPU s (outside the lab)", "translate_diff_cpu_s", 2.0, _largest, True
    ),
    Target("daemon peak RSS, MB", "peak_rss_mb", 200.0, _largest, below=True),
)


def _format(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def build_report(
    lab: dict[str, Any], control: dict[str, Any], host_load: str, commit: str
) -> dict[str, Any]:
    # A size may have only the control-plane figures, which need no lab.
    sizes = sorted(set(lab["sizes"]) | set(control), key=int)
    figures = {
        size: size_figures(lab["sizes"].get(size, {}), control.get(size, {})) for size in sizes
    }
    if len(sizes) > 1:
        growth = _ratio(figures[sizes[-1]]["latency_p99_ms"], figures[sizes[0]]["latency_p99_ms"])
        figures[sizes[-1]]["latency_growth"] = growth
    notes = [
        f"{size} services: {failure}" for size in sizes for failure in figures[size]["failures"]
    ]
    notes += [
        f"{size} services: only the control-plane figures (no lab run at this size)"
        if size not in lab["sizes"]
        else f"{size} services: once_first_sync_s, once_resync_s and their ratios not measured"
        for size in sizes
        if figures[size]["once_first_sync_s"] is None
    ]
    if any(figures[size].get("latency_changes") for size in sizes):
        notes.append(
            "latency: ipvsproxy run --kubeconfig, watching a fake API server in the lab; from the "
            "API write to IPVS holding the change (asked for that one virtual server); "
            "latency_changes and latency_lost_changes say over how many changes"
        )
    if any(lab["sizes"][size].get("daemon") == "not available" for size in lab["sizes"]):
        notes.append(f"latency_p50_ms, latency_p99_ms, peak_rss_mb: {DAEMON_MISSING}")
    return {
        "generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": commit,
        "host_load": host_load,
        "lab_load": lab.get("lab_loadavg"),
        "sizes": figures,
        "notes": notes,
    }


def _targets_table(report: dict[str, Any]) -> list[str]:
    sizes = list(report["sizes"])
    lines = [
        "| target | services | figure | limit | distance |",
        "| --- | --- | --- | --- | --- |",
    ]
    for target in TARGETS:
        for size in target.sizes(sizes):
            value = report["sizes"][size].get(target.field)
            bound = "<" if target.below else "<="
            lines.append(
                f"| {target.what} | {size} | {_format(value)} | {bound} {target.limit:g} "
                f"| {target.verdict(value)} |"
            )
    return lines


def _sum(*values: float | None) -> float | None:
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def _pair(first: Any, second: Any) -> str:
    return f"{_format(first)} / {_format(second)}"


def _triple(figures: dict[str, Any]) -> str:
    return " / ".join(
        _format(figures[name]) for name in ("resync_s", "resync_cpu_s", "resync_writes")
    )


def _change_latency(figures: dict[str, Any], kind: str) -> str:
    latency = (figures.get("latency_by_change") or {}).get(kind) or {}
    return _pair(latency.get("p50_ms"), latency.get("p99_ms"))


Row = tuple[str, Callable[[dict[str, Any]], Any]]
ROWS: tuple[Row, ...] = (
    ("virtual / real servers", lambda f: _pair(f.get("virtual_servers"), f.get("real_servers"))),
    ("`sync --once` first sync, s (process start included)", lambda f: f["once_first_sync_s"]),
    ("`ipvsadm -R` + `ip -batch`, s", lambda f: _sum(f["ipvsadm_restore_s"], f["ip_batch_s"])),
    ("once_first_sync_ratio", lambda f: f["once_first_sync_ratio"]),
    ("`sync --once` no-op resync, s", lambda f: _span(f, "once_resync_s")),
    ("`ipvsadm -Sn` in turns with it, s", lambda f: _span(f, "once_ipvsadm_save_s")),
    ("once_resync_ratio (of the medians)", lambda f: f["once_resync_ratio"]),
    ("`ipvsadm -Sn`, s", lambda f: f["ipvsadm_save_s"]),
    ("`sync --once` peak RSS, MB", lambda f: f.get("once_peak_rss_mb")),
    ("reconciler first sync, s", lambda f: f["first_sync_s"]),
    ("first_sync_ratio", lambda f: f["first_sync_ratio"]),
    ("reconciler resync: wall s / CPU s / writes", _triple),
    ("translate + diff, CPU s (outside the lab)", lambda f: _span(f, "translate_diff_cpu_s")),
    ("one-change latency p50 / p99, ms", lambda f: _pair(f["latency_p50_ms"], f["latency_p99_ms"])),
    # 1h: no periodic full sync inside the changes' window; 30s: the chart's, inside it.
    ("  daemon's --ipvs-sync-period", lambda f: f.get("daemon_sync_period")),
    ("  full syncs inside the changes' window / its length, s",
     lambda f: _pair(f.get("full_syncs_in_window"), f.get("latency_window_s"))),
    *(
        (f"  {kind.replace('_', ' ')} p50 / p99, ms", partial(_change_latency, kind=kind))
        for kind in ("service_added", "endpoint_changed", "service_deleted")
    ),
    ("daemon peak RSS, MB", lambda f: f["peak_rss_mb"]),
)  # fmt: skip


def markdown(report: dict[str, Any]) -> str:
    sizes = list(report["sizes"])
    lines = [
        "# ipvsproxy scale benchmark",
        "",
        f"Generated {report['generated']} at commit {report['commit']}. Kernel figures come from",
        "one User-Mode Linux boot, ipvsproxy and the tools side by side: read the ratios, not the",
        "absolute seconds. Host load (uptime) while it ran: "
        f"{report['host_load']}; lab load at the end: {' '.join(report['lab_load'] or [])}.",
        "",
        "## Figures (N ClusterIP/NodePort services x 10 endpoints, from a JSON manifest)",
        "",
        "| figure | " + " | ".join(f"{size} services" for size in sizes) + " |",
        "| --- |" + " --- |" * len(sizes),
    ]
    for label, pick in ROWS:
        cells = [_format(pick(report["sizes"][size])) for size in sizes]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "## Targets", "", *_targets_table(report), ""]
    if report["notes"]:
        lines += ["## Notes", "", *(f"- {note}" for note in report["notes"]), ""]
    lines += ["Plot: latency.png. Raw figures: report.json.", ""]
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> None:
    sizes = list(report["sizes"])
    counts = [int(size) for size in sizes]
    figure = Figure(figsize=(12, 4.5))
    latency, syncs = figure.subplots(1, 2)
    by_change = [report["sizes"][size].get("latency_by_change") for size in sizes]
    if all(by_change):
        for kind in by_change[0]:
            for stat, style in (("p50_ms", "-o"), ("p99_ms", "--x")):
                values = [entry[kind][stat] for entry in by_change]
                latency.plot(counts, values, style, label=f"{kind} {stat[:3]}")
        latency.axhline(50, color="grey", linewidth=0.8, label="p99 target")
        latency.legend(fontsize=7)
    else:
        latency.text(
            0.5, 0.5, DAEMON_MISSING, ha="center", va="center", transform=latency.transAxes
        )
    latency.set(title="one-change latency (ms)", xlabel="services", xscale="log")
    series = (
        ("sync --once first sync", "once_first_sync_s"),
        ("ipvsadm -R + ip -batch", None),
        ("sync --once resync", "once_resync_s"),
        ("ipvsadm -Sn", "ipvsadm_save_s"),
    )
    for label, field in series:
        values = [
            report["sizes"][s][field]
            if field
            else _sum(report["sizes"][s]["ipvsadm_restore_s"], report["sizes"][s]["ip_batch_s"])
            for s in sizes
        ]
        syncs.plot(counts, values, "-o", label=label)
    syncs.set(title="wall seconds in the lab", xlabel="services", xscale="log", yscale="log")
    syncs.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=100)


# -- ipvsproxy beside kube-proxy (bench.peer) ---------------------------------------------------

PEER_FIELDS = (
    "latency_p50_ms",
    "latency_p99_ms",
    "first_sync_s",
    "full_sync_s",
    "cpu_s_per_100_changes",
    "peak_rss_mb",
)
# The prefix of each proxy's fields in a size's object: ours bare, kube-proxy's beside them.
PEER_PREFIXES = {"ipvsproxy": "", "kube_proxy": "kube_proxy_"}
# What "ahead" means for each field: lower is better for all; RSS only needs to be no higher.
PEER_GOALS = {
    "latency_p99_ms": "below",
    "first_sync_s": "below",
    "full_sync_s": "below",
    "peak_rss_mb": "at most",
}


def _pooled(
    runs: list[dict[str, Any]], kind: str | None, samples_field: str = "latency_samples_ms"
) -> list[float]:
    return [
        sample
        for run in runs
        for name, samples in run.get(samples_field, {}).items()
        if kind is None or name == kind
        for sample in samples
    ]


def _percentiles(samples: list[float]) -> dict[str, float | None]:
    if len(samples) < 2:
        value = samples[0] if samples else None
        return {"p50_ms": value, "p99_ms": value}
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return {"p50_ms": cuts[49], "p99_ms": cuts[98]}


def proxy_figures(runs: list[dict[str, Any]], prefix: str) -> dict[str, Any]:
    """Per field: the median of the runs, with ``_min`` and ``_max``; the pooled latency."""
    measured = [run for run in runs if "failure" not in run]
    figures: dict[str, Any] = {f"{prefix}runs_measured": len(measured)}
    for field in PEER_FIELDS:
        # A run that failed part way keeps the figures it measured before.
        values = [run[field] for run in runs if run.get(field) is not None]
        figures[f"{prefix}{field}"] = statistics.median(values) if values else None
        figures[f"{prefix}{field}_min"] = min(values) if values else None
        figures[f"{prefix}{field}_max"] = max(values) if values else None
        figures[f"{prefix}{field}_runs"] = len(values)
    pooled = _percentiles(_pooled(measured, None))
    figures[f"{prefix}latency_p50_ms_pooled"] = pooled["p50_ms"]
    figures[f"{prefix}latency_p99_ms_pooled"] = pooled["p99_ms"]
    figures[f"{prefix}latency_by_change_pooled"] = {
        kind: _percentiles(_pooled(measured, kind))
        for kind in (measured[0]["latency_samples_ms"] if measured else {})
    }
    figures[f"{prefix}latency_by_phase_pooled"] = {
        phase: _percentiles(_pooled(measured, phase, "latency_samples_by_phase_ms"))
        for phase in (measured[0].get("latency_samples_by_phase_ms", {}) if measured else {})
    }
    changes = [run["latency_changes"] for run in measured]
    figures[f"{prefix}latency_changes_per_run"] = min(changes) if changes else None
    figures[f"{prefix}latency_changes"] = sum(changes)
    figures[f"{prefix}latency_lost_changes"] = sum(run["latency_lost_changes"] for run in measured)
    children = [run["cpu_children_share"] for run in measured if "cpu_children_share" in run]
    figures[f"{prefix}cpu_children_share"] = statistics.median(children) if children else None
    figures[f"{prefix}failures"] = [run["failure"] for run in runs if "failure" in run]
    return figures


def merge_peer(boots: list[dict[str, Any]]) -> dict[str, Any]:
    """Several boots' ``bench.peer`` outputs as one: each size's runs side by side."""
    settings = boots[0]["settings"]
    if any(boot["settings"] != settings for boot in boots):
        raise ValueError("the boots ran with different settings")
    sizes: dict[str, Any] = {}
    for boot in boots:
        for size, measured in boot["sizes"].items():
            merged = sizes.setdefault(
                size, {"create_s": [], "runs": {p: [] for p in PEER_PREFIXES}}
            )
            merged["create_s"].append(measured.get("create_s"))
            for proxy in PEER_PREFIXES:
                merged["runs"][proxy] += measured["runs"][proxy]
    loads = [" ".join(boot.get("lab_loadavg") or ["?"]) for boot in boots]
    return {
        "settings": settings,
        "sizes": sizes,
        "boots": len(boots),
        "lab_loadavg": [" then ".join(loads)],
    }


def build_peer_report(peer: dict[str, Any], host_load: str, commit: str) -> dict[str, Any]:
    sizes: dict[str, Any] = {}
    for size, measured in peer["sizes"].items():
        figures: dict[str, Any] = {"create_s": measured.get("create_s")}
        for proxy, prefix in PEER_PREFIXES.items():
            figures |= proxy_figures(measured["runs"][proxy], prefix)
        sizes[size] = figures | {"runs": measured["runs"]}
    return {
        "generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": commit,
        "host_load": host_load,
        "lab_load": peer.get("lab_loadavg"),
        "boots": peer.get("boots", 1),
        "settings": peer["settings"],
        "sizes": sizes,
        "notes": [
            "each figure: the median of the runs, with _min and _max; the runs of each proxy "
            "alternate in order, each in a fresh network namespace of one lab boot",
            "latency: from the first API write (Service added, EndpointSlice changed, Service "
            "deleted) to IPVS holding the change, each change timed on its own while others "
            "are in flight: a Poisson stream, then a burst (settings.changes); the figure is "
            "over both; *_pooled: over every run's changes; the runs keep the raw samples",
            "cpu_s_per_100_changes: the process's CPU and its waited-for children's over the "
            "changes, the periodic full syncs that fell among them included",
        ],
    }


def _span(figures: dict[str, Any], name: str) -> str:
    median = figures.get(name)
    if median is None:
        return "—"
    low, high = figures.get(f"{name}_min"), figures.get(f"{name}_max")
    runs = figures.get(f"{name}_runs")
    return f"{_format(median)} ({_format(low)} to {_format(high)}, {runs} runs)"


def _verdict(ours: float | None, theirs: float | None, goal: str | None) -> str:
    if ours is None or theirs is None or not theirs:
        return "not measured"
    ratio = f"{ours / theirs:.2f}x"
    if goal is None:
        return ratio
    ahead = ours < theirs if goal == "below" else ours <= theirs
    return f"{ratio}, {'ahead' if ahead else 'behind'}"


def peer_markdown(report: dict[str, Any]) -> str:
    settings = report["settings"]
    lines = [
        "# ipvsproxy beside kube-proxy",
        "",
        f"Generated {report['generated']} at commit {report['commit']}, from "
        f"{report['boots']} User-Mode Linux boot(s), each with a real etcd and kube-apiserver.",
        "Host load (uptime) while it ran: "
        f"{report['host_load']}; lab load at the end: {' '.join(report['lab_load'] or [])}.",
        "",
        "Settings: ipvsproxy "
        + ", ".join(f"{k} {v}" for k, v in settings["ipvsproxy"].items())
        + "; kube-proxy "
        + ", ".join(f"{k} {v}" for k, v in settings["kube_proxy"].items())
        + ".",
        "",
        *_changes_line(settings.get("changes")),
    ]
    for size, figures in report["sizes"].items():
        lines += [
            f"## {size} services x 10 endpoints ({figures['runs_measured']} complete runs of "
            f"ipvsproxy, {figures['kube_proxy_runs_measured']} of kube-proxy)",
            "",
            "| figure: median (min to max) | ipvsproxy | kube-proxy | ipvsproxy / kube-proxy |",
            "| --- | --- | --- | --- |",
        ]
        for field in PEER_FIELDS:
            theirs = f"kube_proxy_{field}"
            verdict = _verdict(figures[field], figures[theirs], PEER_GOALS.get(field))
            lines.append(
                f"| {field} | {_span(figures, field)} | {_span(figures, theirs)} | {verdict} |"
            )
        for name in ("latency_p50_ms_pooled", "latency_p99_ms_pooled"):
            ours, theirs = figures[name], figures[f"kube_proxy_{name}"]
            lines.append(
                f"| {name} | {_format(ours)} | {_format(theirs)} | {_verdict(ours, theirs, None)} |"
            )
        for kind, ours in figures["latency_by_change_pooled"].items():
            theirs = figures["kube_proxy_latency_by_change_pooled"].get(kind, {})
            lines.append(
                f"| {kind} p50 / p99, ms (pooled) | {_pair(ours['p50_ms'], ours['p99_ms'])} "
                f"| {_pair(theirs.get('p50_ms'), theirs.get('p99_ms'))} | |"
            )
        for phase, ours in figures.get("latency_by_phase_pooled", {}).items():
            theirs = figures.get("kube_proxy_latency_by_phase_pooled", {}).get(phase, {})
            lines.append(
                f"| {phase} p50 / p99, ms (pooled) | {_pair(ours['p50_ms'], ours['p99_ms'])} "
                f"| {_pair(theirs.get('p50_ms'), theirs.get('p99_ms'))} | |"
            )
        lines.append(
            f"| share of that CPU in child processes | {_format(figures['cpu_children_share'])} "
            f"| {_format(figures['kube_proxy_cpu_children_share'])} | |"
        )
        lines.append(
            f"| changes measured in all (lost) | {figures['latency_changes']} "
            f"({figures['latency_lost_changes']}) | {figures['kube_proxy_latency_changes']} "
            f"({figures['kube_proxy_latency_lost_changes']}) | |"
        )
        lines.append(
            f"| changes measured, fewest in a run | {figures['latency_changes_per_run']} "
            f"| {figures['kube_proxy_latency_changes_per_run']} | |"
        )
        failures = figures["failures"] + figures["kube_proxy_failures"]
        lines += [
            "",
            *(f"- failed run: {' '.join(failure.split())[:300]}" for failure in failures),
            "",
        ]
    lines += ["## Notes", "", *(f"- {note}" for note in report["notes"]), ""]
    lines += ["Plot: latency.png. Raw figures and samples: report.json.", ""]
    return "\n".join(lines)


def _changes_line(changes: dict[str, Any] | None) -> list[str]:
    if changes is None:
        return []
    return [
        f"Changes a run: a stream of {changes['stream_changes']} at "
        f"{changes['stream_rate_per_s']} a second ({changes['stream_arrivals']}), then a burst "
        f"of {changes['burst_changes']} ({changes['burst']}); kinds "
        f"{', '.join(changes['kinds'])} in equal numbers, {changes['writers']} writers.",
        "",
    ]


def peer_plot(report: dict[str, Any], path: Path) -> None:
    """Per size, each proxy's one-change latencies as a distribution (every run pooled)."""
    sizes = list(report["sizes"])
    figure = Figure(figsize=(6 * len(sizes), 4.5))
    axes = figure.subplots(1, len(sizes), squeeze=False)[0]
    for axis, size in zip(axes, sizes, strict=True):
        for proxy in PEER_PREFIXES:
            runs = [r for r in report["sizes"][size]["runs"][proxy] if "failure" not in r]
            samples = sorted(_pooled(runs, None))
            if samples:
                shares = [(n + 1) / len(samples) for n in range(len(samples))]
                axis.step(samples, shares, where="post", label=proxy.replace("_", "-"))
        axis.set(
            title=f"one-change latency, {size} services",
            xlabel="ms (API write to IPVS)",
            ylabel="share of changes",
            xscale="log",
        )
        axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def _commit() -> str:
    done = subprocess.run(
        ["git", "describe", "--always", "--dirty"], capture_output=True, text=True, check=False
    )
    return done.stdout.strip() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lab", type=Path)
    parser.add_argument("--control", type=Path)
    parser.add_argument(
        "--peer", type=Path, nargs="+", help="bench.peer's outputs (one a boot), instead"
    )
    parser.add_argument("--host-load", default="")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.peer is not None:
        boots = [json.loads(path.read_text()) for path in args.peer]
        report = build_peer_report(merge_peer(boots), args.host_load, _commit())
        text, draw = peer_markdown(report), peer_plot
    elif args.lab is not None and args.control is not None:
        report = build_report(
            json.loads(args.lab.read_text()),
            json.loads(args.control.read_text()),
            args.host_load,
            _commit(),
        )
        text, draw = markdown(report), plot
    else:
        parser.error("give --peer, or --lab and --control")
    (args.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "report.md").write_text(text)
    draw(report, args.out / "latency.png")


if __name__ == "__main__":
    main()
