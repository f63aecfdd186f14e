"""Our ipsets (the names desired state lists) against the kernel's; other sets are not read."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet

from ipvsproxy.kernel.protocols import as_listed
from ipvsproxy.model import (
    AddIPSetEntries,
    CreateIPSet,
    DeleteIPSetEntries,
    IPSetContent,
    IPSetOp,
    ReplaceIPSet,
)
from ipvsproxy.persistent import frozen


def plan_ipsets(
    desired: Mapping[str, IPSetContent], actual: Mapping[str, IPSetContent]
) -> tuple[IPSetOp, ...]:
    """Create missing sets, add missing entries and delete extra ones, set by set; a set of
    another type or with other options (kube-proxy's from another release, or someone's by
    hand) is replaced whole, never destroyed while rules match it."""
    ops: list[IPSetOp] = []
    for name in sorted(desired):
        wanted = desired[name]
        current = actual.get(name)
        # Made once in C (the desired entries may be a PersistentSet), not once per difference.
        entries = frozen(wanted.entries)
        if current is None:
            ops.append(CreateIPSet(wanted.spec))
            have: AbstractSet[str] = frozenset()
        elif current.spec != as_listed(wanted.spec):
            ops.append(ReplaceIPSet(wanted))
            continue
        else:
            have = frozen(current.entries)
        if missing := entries - have:
            ops.append(AddIPSetEntries(name, tuple(sorted(missing))))
        if extra := have - entries:
            ops.append(DeleteIPSetEntries(name, tuple(sorted(extra))))
    return tuple(ops)


def plan_entry_changes(
    added: Mapping[str, frozenset[str]],
    removed: Mapping[str, frozenset[str]],
) -> tuple[IPSetOp, ...]:
    """The entries that came and went, set by set, in ``plan_ipsets``'s order; the sets exist."""
    ops: list[IPSetOp] = []
    for name in sorted(added.keys() | removed.keys()):
        if name in added:
            ops.append(AddIPSetEntries(name, tuple(sorted(added[name]))))
        if name in removed:
            ops.append(DeleteIPSetEntries(name, tuple(sorted(removed[name]))))
    return tuple(ops)
