"""Turn the benchmark's raw figures into bench-results/report.{json,md} and latency.png.

``python -m bench.report --lab LAB.json --control CONTROL.json --host-load "..." --out DIR``.
The JSON keeps the field names other tools read (one object per size under "sizes", keyed by
the service count as a string); figures not measured are null, with the reason in "notes".
"""

from __future__ import annotations

import argparse
import json
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
    merged["once_resync_ratio"] = _ratio(lab.get("once_resync_s"), lab.get("ipvsadm_save_s"))
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
    ("`sync --once` no-op resync, s", lambda f: f["once_resync_s"]),
    ("`ipvsadm -Sn`, s", lambda f: f["ipvsadm_save_s"]),
    ("once_resync_ratio", lambda f: f["once_resync_ratio"]),
    ("`sync --once` peak RSS, MB", lambda f: f.get("once_peak_rss_mb")),
    ("reconciler first sync, s", lambda f: f["first_sync_s"]),
    ("first_sync_ratio", lambda f: f["first_sync_ratio"]),
    ("reconciler resync: wall s / CPU s / writes", _triple),
    ("translate + diff, CPU s (outside the lab)", lambda f: f["translate_diff_cpu_s"]),
    ("one-change latency p50 / p99, ms", lambda f: _pair(f["latency_p50_ms"], f["latency_p99_ms"])),
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


def _commit() -> str:
    done = subprocess.run(
        ["git", "describe", "--always", "--dirty"], capture_output=True, text=True, check=False
    )
    return done.stdout.strip() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lab", type=Path, required=True)
    parser.add_argument("--control", type=Path, required=True)
    parser.add_argument("--host-load", default="")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    report = build_report(
        json.loads(args.lab.read_text()),
        json.loads(args.control.read_text()),
        args.host_load,
        _commit(),
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "report.md").write_text(markdown(report))
    plot(report, args.out / "latency.png")


if __name__ == "__main__":
    main()
