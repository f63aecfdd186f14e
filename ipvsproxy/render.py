"""A plan in Kubernetes terms, as text that reads like a diff or as JSON."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence

from ipvsproxy.model import (
    AddRealServer,
    AddVirtualServer,
    DeleteRealServer,
    DeleteVirtualServer,
    DesiredState,
    IPVSOp,
    RealServer,
    UpdateRealServer,
    UpdateVirtualServer,
    VirtualServer,
    VirtualServerKey,
)


def _virtual(server: VirtualServer) -> str:
    persistence = f" persistent {server.timeout}" if server.timeout else ""
    return f"{server.key} {server.scheduler}{persistence}"


def _real(server: RealServer) -> str:
    return f"{server.key} {server.forward.name.lower()} weight {server.weight}"


def _owner(desired: DesiredState, key: VirtualServerKey) -> str:
    wanted = desired.virtual_servers.get(key)
    return f"  ({wanted.owner}, {wanted.kind})" if wanted else ""


def _line(op: IPVSOp, desired: DesiredState) -> str:
    match op:
        case AddVirtualServer(server):
            return f"+ {_virtual(server)}{_owner(desired, server.key)}"
        case UpdateVirtualServer(server):
            return f"~ {_virtual(server)}{_owner(desired, server.key)}"
        case DeleteVirtualServer(key):
            return f"- {key}"
        case AddRealServer(virtual, server):
            return f"    + {_real(server)}  (on {virtual})"
        case UpdateRealServer(virtual, server):
            return f"    ~ {_real(server)}  (on {virtual})"
        case DeleteRealServer(virtual, key):
            return f"    - {key}  (on {virtual})"


def _counts(ops: Sequence[IPVSOp]) -> Counter[str]:
    return Counter(type(op).__name__ for op in ops)


def plan_text(ops: Sequence[IPVSOp], desired: DesiredState) -> str:
    lines = [_line(op, desired) for op in ops]
    counts = _counts(ops)
    summary = ", ".join(f"{count} {name}" for name, count in sorted(counts.items()))
    lines.append(f"{len(ops)} operations" + (f": {summary}" if ops else ""))
    lines.extend(f"skipped {r.object}: {r.reason}" for r in desired.rejections)
    return "\n".join(lines)


def plan_json(ops: Sequence[IPVSOp], desired: DesiredState) -> str:
    return json.dumps(
        {
            "operations": [
                {"op": type(op).__name__, "text": _line(op, desired).strip()} for op in ops
            ],
            "counts": dict(sorted(_counts(ops).items())),
            "skipped": [{"object": r.object, "reason": r.reason} for r in desired.rejections],
        },
        indent=2,
    )
