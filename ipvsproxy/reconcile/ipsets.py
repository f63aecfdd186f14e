"""Our ipsets (the names desired state lists) against the kernel's; other sets are not read."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

from ipvsproxy.kernel.errors import EntryError
from ipvsproxy.kernel.ipset.entries import parse_entry
from ipvsproxy.model import (
    AddIPSetEntries,
    CreateIPSet,
    DeleteIPSetEntries,
    IPFamily,
    IPSetContent,
    IPSetOp,
)


# Every sync compares every entry; parsing them again each time cost most of a no-op sync.
@lru_cache(maxsize=1 << 18)
def _canonical(entry: str, set_type: str, family: IPFamily) -> str:
    try:
        return str(parse_entry(entry, set_type, family))
    except EntryError:
        return entry


def canonical_entries(content: IPSetContent) -> frozenset[str]:
    """The entries as the kernel lists them, so equal entries compare equal; bad ones as given."""
    spec = content.spec
    return frozenset(_canonical(entry, spec.set_type, spec.family) for entry in content.entries)


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
        entries = canonical_entries(wanted)
        if missing := entries - have:
            ops.append(AddIPSetEntries(name, tuple(sorted(missing))))
        if extra := have - entries:
            ops.append(DeleteIPSetEntries(name, tuple(sorted(extra))))
    return tuple(ops)
