"""In-memory ipsets that refuse what the kernel refuses, as ``NetlinkIPSets`` sees them."""

from __future__ import annotations

import errno
from collections.abc import Iterator, Mapping, Sequence

from ipvsproxy.kernel.ipset.entries import same_kind
from ipvsproxy.kernel.ipset.refusals import (
    busy,
    checked,
    exists_differently,
    parse_all,
    refused_entries,
)
from ipvsproxy.kernel.protocols import as_listed
from ipvsproxy.model import BatchResult, IPSetContent, IPSetSpec, OpError


class FakeIPSets:
    """In-memory sets that refuse what the kernel refuses, with the kernel's errnos.

    ``hold`` stands for an iptables rule that refers to a set; ``plant`` for a set someone
    else made.
    """

    def __init__(self) -> None:
        self._specs: dict[str, IPSetSpec] = {}
        self._entries: dict[str, set[str]] = {}
        self._held: set[str] = set()

    def list_sets(self) -> Mapping[str, IPSetContent]:
        return {
            name: IPSetContent(as_listed(spec), frozenset(self._entries[name]))
            for name, spec in self._specs.items()
        }

    def listed(self) -> Iterator[IPSetContent]:
        # Read at the first step, as a netlink dump is.
        yield from self.list_sets().values()

    def create(self, spec: IPSetSpec) -> None:
        checked(spec)
        existing = self._specs.get(spec.name)
        if existing is None:
            self._specs[spec.name] = spec
            self._entries[spec.name] = set()
        elif not same_kind(existing, spec):
            raise exists_differently(spec)

    def destroy(self, name: str) -> None:
        if name in self._held:
            raise busy(name)
        self._specs.pop(name, None)
        self._entries.pop(name, None)

    def add(self, name: str, entries: Sequence[str]) -> BatchResult:
        return self._change(name, entries, add=True)

    def delete(self, name: str, entries: Sequence[str]) -> BatchResult:
        return self._change(name, entries, add=False)

    def _change(self, name: str, entries: Sequence[str], add: bool) -> BatchResult:
        spec = self._specs.get(name)
        if spec is None:
            return [OpError(errno.ENOENT, f"set {name} does not exist") for _ in entries]
        results: BatchResult = []
        for entry in parse_all(spec, entries):
            if isinstance(entry, OpError):
                results.append(entry)
                continue
            if add:
                self._entries[name].add(str(entry))
            else:
                self._entries[name].discard(str(entry))
            results.append(None)
        return results

    def replace(self, content: IPSetContent) -> None:
        self.create(content.spec)
        entries = sorted(content.entries)
        parsed = parse_all(content.spec, entries)
        refused_entries(
            content.spec, entries, [e if isinstance(e, OpError) else None for e in parsed]
        )
        # Swapped in whole: the new set's options with its entries.
        self._specs[content.spec.name] = content.spec
        self._entries[content.spec.name] = {str(entry) for entry in parsed}

    def hold(self, name: str) -> None:
        self._held.add(name)

    def plant(self, content: IPSetContent) -> None:
        """A set someone else made, with creation options of its own (``ipset create NAME
        TYPE maxelem 1024``), which ``create`` never makes."""
        self._specs[content.spec.name] = content.spec
        self._entries[content.spec.name] = set(content.entries)
