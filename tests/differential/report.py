"""The boots' findings merged into one report (pure): each distinct difference once, with
where it was seen and its explanation; errors; and the last line CI reads."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

JsonObject = dict[str, Any]
KEY_FIELDS = ("section", "subject", "kube_proxy", "ours")


@dataclass
class Distinct:
    """One difference however often it was seen: where first, how often, explained or not."""

    record: JsonObject
    seen: int = 1


@dataclass
class Summary:
    scenarios: list[str] = field(default_factory=list)
    steps: int = 0
    compares: int = 0
    probes: int = 0
    differences: list[Distinct] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def explained(self) -> int:
        return sum(1 for d in self.differences if d.record.get("explained"))

    @property
    def passed(self) -> bool:
        return not self.errors and self.explained == len(self.differences)

    def last_line(self) -> str:
        return (
            f"differential: {len(self.scenarios)} scenarios, {self.steps} steps, "
            f"{len(self.differences)} differences, {self.explained} explained"
        )


def merge(boots: Sequence[JsonObject | None], statuses: Sequence[int]) -> Summary:
    """``boots``: each boot's results (None when it wrote none); ``statuses``: their exits."""
    summary = Summary()
    by_key: dict[tuple[str, ...], Distinct] = {}
    for index, (found, status) in enumerate(zip(boots, statuses, strict=True)):
        if found is None:
            summary.errors.append(f"boot {index + 1} wrote no results (lab exit status {status})")
            continue
        if status != 0:
            summary.errors.append(f"boot {index + 1}: lab exit status {status}")
        summary.scenarios += [s for s in found["scenarios"] if s not in summary.scenarios]
        summary.steps += found["steps"]
        summary.compares += found["compares"]
        summary.probes += found["probes"]
        summary.errors += [f"boot {index + 1}: {error}" for error in found["errors"]]
        for record in found["found"]:
            key = tuple(record[name] for name in KEY_FIELDS)
            if key in by_key:
                by_key[key].seen += 1
            else:
                by_key[key] = Distinct(record)
    summary.differences = sorted(
        by_key.values(), key=lambda d: (bool(d.record.get("explained")), d.record["section"])
    )
    return summary


def _render(distinct: Distinct) -> str:
    record = distinct.record
    why = record.get("explained")
    label = f"explained: {why}" if why else "UNEXPLAINED"
    owners = f" ({', '.join(record['owners'])})" if record.get("owners") else ""
    return (
        f"[{label}] {record['section']}: {record['subject']}{owners}\n"
        f"    kube-proxy: {record['kube_proxy']}\n"
        f"    ipvsproxy:  {record['ours']}\n"
        f"    first seen under {record['profile']}, {record['moment']}; "
        f"{distinct.seen} time(s) in all"
    )


def render(summary: Summary) -> str:
    lines = [_render(d) for d in summary.differences]
    lines += [f"differential: error: {error}" for error in summary.errors]
    lines.append(
        f"differential: {summary.compares} comparisons of the two kernels, "
        f"{summary.probes} traffic verdicts"
    )
    lines.append(summary.last_line())
    return "\n".join(lines)
