"""Our ipsets (the names desired state lists) against the kernel's; other sets are not read."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from functools import lru_cache

from ipvsproxy.kernel.ipset.entries import as_listed, parse_entry
from ipvsproxy.kernel.protocols import EntryError
from ipvsproxy.model import (
    AddIPSetEntries,
    CreateIPSet,
    DeleteIPSetEntries,
    IPFamily,
    IPSetContent,
    IPSetOp,
    IPSetSpec,
    ReplaceIPSet,
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
    return _canonical_of(content.spec, content.entries)


def _canonical_of(spec: IPSetSpec, entries: Iterable[str]) -> frozenset[str]:
    return frozenset(_canonical(entry, spec.set_type, spec.family) for entry in entries)


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
        entries = canonical_entries(wanted)
        if current is None:
            ops.append(CreateIPSet(wanted.spec))
            have: AbstractSet[str] = frozenset()
        elif current.spec != as_listed(wanted.spec):
            ops.append(ReplaceIPSet(IPSetContent(wanted.spec, entries)))
            continue
        else:
            have = current.entries
        if missing := entries - have:
            ops.append(AddIPSetEntries(name, tuple(sorted(missing))))
        if extra := have - entries:
            ops.append(DeleteIPSetEntries(name, tuple(sorted(extra))))
    return tuple(ops)


def plan_entry_changes(
    desired: Mapping[str, IPSetContent],
    added: Mapping[str, frozenset[str]],
    removed: Mapping[str, frozenset[str]],
) -> tuple[IPSetOp, ...]:
    """The entries that came and went, set by set, in ``plan_ipsets``'s order; the sets exist."""
    ops: list[IPSetOp] = []
    for name in sorted(added.keys() | removed.keys()):
        spec = desired[name].spec
        if name in added:
            ops.append(AddIPSetEntries(name, tuple(sorted(_canonical_of(spec, added[name])))))
        if name in removed:
            ops.append(DeleteIPSetEntries(name, tuple(sorted(_canonical_of(spec, removed[name])))))
    return tuple(ops)
