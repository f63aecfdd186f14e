"""Our ipsets (the names desired state lists) against the kernel's; other sets are not read."""

from __future__ import annotations

from collections.abc import Mapping

from ipvsproxy.model import IPSetContent
from ipvsproxy.reconcile.operations import (
    AddIPSetEntries,
    CreateIPSet,
    DeleteIPSetEntries,
    IPSetOp,
)


def plan_ipsets(
    desired: Mapping[str, IPSetContent], actual: Mapping[str, IPSetContent]
) -> tuple[IPSetOp, ...]:
    """Create missing sets, add missing entries and delete extra ones, set by set."""
    ops: list[IPSetOp] = []
    for name in sorted(desired):
        wanted = desired[name]
        current = actual.get(name)
        if current is None:
            ops.append(CreateIPSet(wanted.spec))
            have: frozenset[str] = frozenset()
        else:
            have = current.entries
        if missing := wanted.entries - have:
            ops.append(AddIPSetEntries(name, tuple(sorted(missing))))
        if extra := have - wanted.entries:
            ops.append(DeleteIPSetEntries(name, tuple(sorted(extra))))
    return tuple(ops)
