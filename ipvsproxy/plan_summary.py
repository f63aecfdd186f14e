"""A big plan in a screenful: what changes outside IPVS, IPVS work by kind and by namespace,
and the objects skipped, instead of one line per virtual and real server (121,000 lines at
10,000 services)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from ipvsproxy.model import (
    AddRealServer,
    AddVirtualServer,
    DeleteRealServer,
    DeleteVirtualServer,
    DesiredState,
    IptablesChainDiff,
    IPVSOp,
    UpdateRealServer,
    UpdateVirtualServer,
    virtual_of,
)
from ipvsproxy.reconcile.syncplan import SyncPlan
from ipvsproxy.render import counts_line, kernel_setup_lines

# Above this many operations a text plan is summarized unless --full is given.
SUMMARY_ABOVE = 1000
NAMESPACES_SHOWN = 20
SKIPPED_SHOWN = 20
# Virtual servers no Service wants any more have no namespace to count under.
NOT_DESIRED = "(no longer desired)"

_ADD, _UPDATE, _DELETE = "+", "~", "-"
_KINDS: dict[type, tuple[str, str]] = {
    AddVirtualServer: ("virtual", _ADD),
    UpdateVirtualServer: ("virtual", _UPDATE),
    DeleteVirtualServer: ("virtual", _DELETE),
    AddRealServer: ("real", _ADD),
    UpdateRealServer: ("real", _UPDATE),
    DeleteRealServer: ("real", _DELETE),
}


@dataclass
class _Tally:
    virtual: Counter[str] = field(default_factory=Counter)
    real: Counter[str] = field(default_factory=Counter)

    def add(self, op: IPVSOp) -> None:
        server, change = _KINDS[type(op)]
        (self.virtual if server == "virtual" else self.real)[change] += 1

    @property
    def total(self) -> int:
        return sum(self.virtual.values()) + sum(self.real.values())

    def columns(self) -> str:
        def three(counter: Counter[str]) -> str:
            return " ".join(f"{mark}{counter[mark]}" for mark in (_ADD, _UPDATE, _DELETE))

        return f"{three(self.virtual)}   {three(self.real)}"


def _by_namespace(plan: SyncPlan, desired: DesiredState) -> tuple[_Tally, dict[str, _Tally]]:
    total = _Tally()
    namespaces: dict[str, _Tally] = {}
    for op in plan.ipvs.ops:
        wanted = desired.virtual_servers.get(virtual_of(op))
        namespace = wanted.owner.service.namespace if wanted is not None else NOT_DESIRED
        namespaces.setdefault(namespace, _Tally()).add(op)
        total.add(op)
    return total, namespaces


def _namespace_lines(namespaces: dict[str, _Tally]) -> list[str]:
    ranked = sorted(namespaces.items(), key=lambda item: (-item[1].total, item[0]))
    width = max((len(name) for name, _ in ranked[:NAMESPACES_SHOWN]), default=0)
    lines = [
        "by namespace (virtual servers added, updated, deleted; then real servers):",
        *(f"  {name:<{width}}  {tally.columns()}" for name, tally in ranked[:NAMESPACES_SHOWN]),
    ]
    if len(ranked) > NAMESPACES_SHOWN:
        rest = sum(tally.total for _, tally in ranked[NAMESPACES_SHOWN:])
        lines.append(
            f"  ... and {len(ranked) - NAMESPACES_SHOWN} more namespaces with {rest} operations"
        )
    return lines


def _skipped_lines(desired: DesiredState) -> list[str]:
    rejections = desired.rejections
    if not rejections:
        return ["skipped nothing"]
    reasons = ", ".join(
        f"{count} {reason}" for reason, count in desired.skipped_by_reason().items() if count
    )
    lines = [f"skipped {len(rejections)} objects ({reasons}):"]
    lines += [f"skipped {r.object}: {r.reason}" for r in rejections[:SKIPPED_SHOWN]]
    if len(rejections) > SKIPPED_SHOWN:
        lines.append(f"... and {len(rejections) - SKIPPED_SHOWN} more skipped (--full lists each)")
    return lines


def summary_text(
    plan: SyncPlan,
    desired: DesiredState,
    iptables_changes: Sequence[IptablesChainDiff] | None = None,
) -> str:
    total, namespaces = _by_namespace(plan, desired)
    draining = len(plan.ipvs.draining)
    lines = [
        *kernel_setup_lines(plan, iptables_changes),
        f"virtual servers: {total.virtual[_ADD]} to add, {total.virtual[_UPDATE]} to update, "
        f"{total.virtual[_DELETE]} to delete",
        f"real servers: {total.real[_ADD]} to add, {total.real[_UPDATE]} to update, "
        f"{total.real[_DELETE]} to delete, {draining} draining",
    ]
    if namespaces:
        lines += _namespace_lines(namespaces)
    lines.append(counts_line(plan))
    lines += _skipped_lines(desired)
    return "\n".join(lines)


def summarized(plan: SyncPlan, summary: bool | None) -> bool:
    """--summary, --full, or neither: summarize plans too long to read line by line."""
    return summary if summary is not None else len(plan.operations()) > SUMMARY_ABOVE
