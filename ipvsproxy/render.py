"""A sync plan or result in Kubernetes terms, as text that reads like a diff or as JSON.

Virtual servers are grouped with their real servers and drains, after a summary of the
address, ipset, iptables and conntrack work.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, assert_never

from ipvsproxy.json_stream import EachEncoded, json_chunks
from ipvsproxy.model import (
    AddIPSetEntries,
    AddRealServer,
    AddVirtualServer,
    CreateIPSet,
    DeleteIPSetEntries,
    DeleteRealServer,
    DeleteVirtualServer,
    DesiredState,
    IptablesChainDiff,
    IPVSOp,
    PlanOp,
    RealServer,
    RealServerRef,
    ReplaceIPSet,
    UpdateRealServer,
    UpdateVirtualServer,
    VirtualServer,
    VirtualServerKey,
    virtual_of,
)
from ipvsproxy.plan_json import SCHEMA, operation_json
from ipvsproxy.reconcile.describe import describe
from ipvsproxy.reconcile.graceful import Drain
from ipvsproxy.reconcile.reconciler import SyncResult
from ipvsproxy.reconcile.syncplan import SyncPlan

if TYPE_CHECKING:
    from ipvsproxy.reconcile.takeover import TakeoverCheck


def _virtual(server: VirtualServer) -> str:
    persistence = f" persistent {server.timeout}" if server.timeout else ""
    return f"{server.key} {server.scheduler}{persistence}"


def _real(server: RealServer) -> str:
    return f"{server.key} {server.forward.name.lower()} weight {server.weight}"


def _owner(desired: DesiredState, key: VirtualServerKey) -> str:
    wanted = desired.virtual_servers.get(key)
    return f"  ({wanted.owner}, {wanted.kind})" if wanted else ""


FLUSHED = "  conntrack entries flushed"


def _header(
    key: VirtualServerKey, ops: Sequence[IPVSOp], plan: SyncPlan, desired: DesiredState
) -> str:
    """The virtual server's line: added, updated, deleted, or unchanged (context)."""
    for op in ops:
        match op:
            case AddVirtualServer(server):
                return f"+ {_virtual(server)}{_owner(desired, key)}"
            case UpdateVirtualServer(server):
                return f"~ {_virtual(server)}{_owner(desired, key)}"
            case DeleteVirtualServer():
                flushed = any(flush.virtual == key for flush in plan.ipvs.flushes)
                return f"- {key}  (no longer desired)" + (FLUSHED if flushed else "")
            case AddRealServer() | UpdateRealServer() | DeleteRealServer():
                pass  # a real server's line, below the header
            case _:
                assert_never(op)
    wanted = desired.virtual_servers.get(key)
    shown = _virtual(wanted.server) if wanted else str(key)
    return f"  {shown}{_owner(desired, key)}"


def _connections(drain: Drain) -> str:
    return f"{drain.active_connections} active, {drain.inactive_connections} inactive connections"


def _real_line(
    op: IPVSOp, drains: dict[RealServerRef, Drain], flushed: set[RealServerRef]
) -> str | None:
    match op:
        case AddRealServer(_, server):
            return f"    + {_real(server)}"
        case UpdateRealServer(virtual, server):
            drain = drains.get(RealServerRef(virtual, server.key))
            if drain is not None and server.weight == 0:
                return f"    ~ {_real(server)}  draining ({_connections(drain)})"
            return f"    ~ {_real(server)}"
        case DeleteRealServer(virtual, key):
            return f"    - {key}" + (FLUSHED if RealServerRef(virtual, key) in flushed else "")
        case AddVirtualServer() | UpdateVirtualServer() | DeleteVirtualServer():
            return None  # the header's
        case _:
            assert_never(op)


def _ipvs_lines(plan: SyncPlan, desired: DesiredState) -> list[str]:
    by_virtual: dict[VirtualServerKey, list[IPVSOp]] = {}
    for op in plan.ipvs.ops:
        by_virtual.setdefault(virtual_of(op), []).append(op)
    drains = {drain.ref: drain for drain in plan.ipvs.draining}
    flushed = {RealServerRef(flush.virtual, flush.real) for flush in plan.ipvs.flushes}
    for drain in plan.ipvs.draining:
        by_virtual.setdefault(drain.ref.virtual, [])
    lines: list[str] = []
    for key in sorted(by_virtual, key=VirtualServerKey.sort_key):
        ops = by_virtual[key]
        lines.append(_header(key, ops, plan, desired))
        lines.extend(line for op in ops if (line := _real_line(op, drains, flushed)) is not None)
        changed = {op.server.key for op in ops if isinstance(op, UpdateRealServer)}
        lines.extend(
            f"    = {drain.ref.real} weight 0  draining, waiting ({_connections(drain)})"
            for drain in plan.ipvs.draining
            if drain.ref.virtual == key and drain.ref.real not in changed
        )
    return lines


def _listed(items: Sequence[object], limit: int = 5) -> str:
    shown = ", ".join(str(item) for item in items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _iptables_lines(plan: SyncPlan, changes: Sequence[IptablesChainDiff] | None) -> list[str]:
    """What the restores change, rule by rule, where the kernel was read; else that they
    are written where they differ."""
    families = ", ".join(str(ruleset.family) for ruleset in plan.iptables)
    if changes is None:
        return [f"~ iptables chains ({families}): restored where they differ"]
    if not changes:
        return [f"= iptables chains ({families}): as wanted"]
    lines = []
    for chain in changes:
        mark, state = ("+", "new chain") if chain.new else ("~", "chain")
        lines.append(f"{mark} iptables {chain.family} {chain.table} {state} {chain.chain}")
        lines.extend(f"    - -A {chain.chain} {rule}" for rule in chain.removed)
        lines.extend(f"    + -A {chain.chain} {rule}" for rule in chain.added)
    return lines


def kernel_setup_lines(
    plan: SyncPlan, iptables_changes: Sequence[IptablesChainDiff] | None = None
) -> list[str]:
    parameters: list[PlanOp] = [*plan.sysctls, *plan.timeouts]
    lines = [f"~ {describe(op)}" for op in parameters]
    if plan.create_interface:
        lines.append(f"+ interface {plan.interface}")
    if plan.bind:
        lines.append(
            f"+ {len(plan.bind)} addresses on {plan.interface}: "
            f"{_listed([op.address for op in plan.bind])}"
        )
    if plan.unbind:
        lines.append(
            f"- {len(plan.unbind)} addresses from {plan.interface}: "
            f"{_listed([op.address for op in plan.unbind])}"
        )
    created = [op.spec.name for op in plan.ipsets if isinstance(op, CreateIPSet)]
    added = sum(len(op.entries) for op in plan.ipsets if isinstance(op, AddIPSetEntries))
    deleted = sum(len(op.entries) for op in plan.ipsets if isinstance(op, DeleteIPSetEntries))
    if created:
        lines.append(f"+ {len(created)} ipsets: {_listed(created)}")
    if added or deleted:
        lines.append(f"~ ipset entries: {added} to add, {deleted} to delete")
    lines += [f"~ {describe(op)}" for op in plan.ipsets if isinstance(op, ReplaceIPSet)]
    if plan.iptables:
        lines += _iptables_lines(plan, iptables_changes)
    return lines


def counts_line(plan: SyncPlan) -> str:
    counts = plan.counts()
    summary = ", ".join(f"{count} {name}" for name, count in sorted(counts.items()))
    draining = f"; {len(plan.ipvs.draining)} draining" if plan.ipvs.draining else ""
    return f"{sum(counts.values())} operations" + (f": {summary}" if counts else "") + draining


def sync_plan_text(
    plan: SyncPlan,
    desired: DesiredState,
    iptables_changes: Sequence[IptablesChainDiff] | None = None,
) -> str:
    """Every operation; ``iptables_changes``: the rule diff, where the kernel was read."""
    lines = [
        *kernel_setup_lines(plan, iptables_changes),
        *_ipvs_lines(plan, desired),
        counts_line(plan),
    ]
    lines.extend(f"skipped {r.object}: {r.reason}" for r in desired.rejections)
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Baseline:
    """What a plan was made against: the live kernel, or an empty one and why."""

    live: bool
    reason: str = ""

    def fields(self) -> dict[str, Any]:
        return {
            "against": "kernel" if self.live else "empty",
            "against_reason": self.reason or None,
        }


LIVE_KERNEL = Baseline(live=True)


def _operations(ops: Sequence[PlanOp], desired: DesiredState) -> EachEncoded[PlanOp]:
    return EachEncoded(ops, partial(operation_json, desired=desired))


def _drains(drains: Sequence[Drain]) -> list[dict[str, str | int]]:
    return [
        {
            "virtual_server": str(drain.ref.virtual),
            "real_server": str(drain.ref.real),
            "active_connections": drain.active_connections,
            "inactive_connections": drain.inactive_connections,
        }
        for drain in drains
    ]


def _plan_dict(plan: SyncPlan, desired: DesiredState) -> dict[str, object]:
    return {
        "operations": _operations(plan.operations(), desired),
        "draining": _drains(plan.ipvs.draining),
        "counts": dict(sorted(plan.counts().items())),
        "skipped": [
            {"object": r.object, "reason": r.reason, "category": str(r.category)}
            for r in desired.rejections
        ],
        "skipped_by_reason": {str(k): n for k, n in desired.skipped_by_reason().items()},
    }


def sync_plan_json(
    plan: SyncPlan, desired: DesiredState, baseline: Baseline = LIVE_KERNEL
) -> Iterator[str]:
    """A dry run's plan as JSON text in chunks: README's "JSON output" documents every field."""
    document = {"schema": SCHEMA, "dry_run": True, **baseline.fields()}
    return json_chunks({**document, **_plan_dict(plan, desired)})


def takeover_text(check: TakeoverCheck) -> str:
    """The verdict of ``takeover --check``, after the plan it judged."""
    lines = [
        f"takeover: {check.adopted} virtual servers adopted, {check.untouched} of them as they "
        f"are; {check.ipvs_writes} IPVS writes",
        *(f"takeover: {interruption}" for interruption in check.interruptions),
    ]
    if check.real_servers_cut:
        lines.append(
            f"takeover: {check.real_servers_cut} UDP or SCTP real servers with flows would go "
            "at once, their flows forgotten (as kube-proxy does)"
        )
    if check.safe:
        lines.append("takeover: safe: no virtual server carrying traffic is deleted or re-created")
    else:
        lines.append(
            f"takeover: NOT safe: {len(check.interruptions)} virtual servers carrying traffic "
            "would be deleted or re-created"
        )
    return "\n".join(lines)


def takeover_json(plan: SyncPlan, desired: DesiredState, check: TakeoverCheck) -> Iterator[str]:
    """``takeover --check``'s plan as ``sync --dry-run`` prints it, with its verdict."""
    verdict = {
        "safe": check.safe,
        "adopted": check.adopted,
        "untouched": check.untouched,
        "ipvs_writes": check.ipvs_writes,
        "interrupted": [
            {
                "virtual_server": str(interruption.key),
                "connections": interruption.connections,
                "recreated": interruption.recreated,
            }
            for interruption in check.interruptions
        ],
        "real_servers_cut": check.real_servers_cut,
    }
    document = {"schema": SCHEMA, "dry_run": True, **LIVE_KERNEL.fields()}
    return json_chunks({**document, **_plan_dict(plan, desired), "takeover": verdict})


def sync_result_text(result: SyncResult) -> str:
    """What a sync did, after its plan: totals, drift repaired, and each failure on a line."""
    lines = [
        f"applied {len(result.applied)} operations ({result.writes} kernel writes), "
        f"{len(result.failures)} failed, {len(result.held_back)} held back, "
        f"{len(result.draining)} draining"
    ]
    if result.drift:
        repaired = ", ".join(f"{count} {kind}" for kind, count in sorted(result.drift.items()))
        lines.append(f"drift repaired: {repaired}")
    lines.extend(f"failed: {failure}" for failure in result.failures)
    return "\n".join(lines)


def sync_result_json(result: SyncResult, desired: DesiredState) -> Iterator[str]:
    """What a sync did as JSON text in chunks."""
    return json_chunks(
        {
            "schema": SCHEMA,
            "dry_run": False,
            **LIVE_KERNEL.fields(),
            "plan": _plan_dict(result.plan, desired),
            "applied": _operations(result.applied, desired),
            "failures": [
                {"text": str(f), "errno": f.error.errno, "reason": f.error.message}
                for f in result.failures
            ],
            "held_back": _operations(result.held_back, desired),
            "draining": _drains(result.draining),
            "writes": result.writes,
            "drift": dict(sorted(result.drift.items())),
        }
    )


CLEANUP_SCHEMA = "ipvsproxy.io/cleanup/v1"


def cleanup_json(dry_run: bool, removed: Sequence[str], failed: Sequence[str]) -> Iterator[str]:
    """What ``cleanup`` removed (or would, with --dry-run), each object named as in its text,
    and what it could not remove or read."""
    key = "would_remove" if dry_run else "removed"
    document = {"schema": CLEANUP_SCHEMA, "dry_run": dry_run, key: list(removed)}
    return json_chunks({**document, "failed": list(failed)})
