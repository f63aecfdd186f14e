"""Our iptables chains and their jumps, written whole and only when the kernel differs.

``IptablesRestore`` drives the iptables-save / iptables-restore binaries (backend detected as
kube-proxy's iptables-wrapper does); ``kernel.testing.FakeIptables`` drives tables in memory
that read the same restore text. Both share everything above those two calls (``Iptables``), so
the fake tests the text.

A restore writes nothing when the kernel already holds exactly our chains and jumps. The
kernel prints some rules differently from how they were written (``--or-mark`` comes back as
``--set-xmark``, ``! -s`` moves first), so rules compare in the form iptables-save prints
(``canonical``), and a rule set also counts as held when the kernel shows what it read back
right after we last wrote that same rule set: a form ``canonical`` does not know costs one
write per process, never one per sync.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from ipvsproxy.kernel.errors import IptablesError
from ipvsproxy.kernel.iptables.backend import detect
from ipvsproxy.kernel.iptables.command import RESTORE_WAIT, Started, binary, run
from ipvsproxy.kernel.iptables.text import (
    Rule,
    Tables,
    canonical,
    is_builtin,
    parse_save,
    render_rule,
    table_block,
    target,
)
from ipvsproxy.model import (
    IPTABLES_CHAINS,
    IPFamily,
    IptablesChainDiff,
    IptablesJump,
    IptablesRuleset,
)

OUR_CHAINS: Mapping[str, frozenset[str]] = {
    table: frozenset(chains) for table, chains in IPTABLES_CHAINS.items()
}


class Netfilter(Protocol):
    def save(self, family: IPFamily) -> str:
        """Every table, as iptables-save prints it (or printed it when ``read_ahead``)."""
        ...

    def read_ahead(self, family: IPFamily) -> None:
        """Take the next ``save`` of ``family`` from now on, while the caller reads the rest
        of the kernel; a ``restore`` of it in between makes that save read again."""
        ...

    def restore(self, family: IPFamily, text: str) -> None:
        """One iptables-restore --noflush; raises IptablesError when refused."""
        ...


@dataclass(frozen=True, slots=True)
class _View:
    """What the kernel holds of one rule set: its chains (None: missing) and the jumps to them."""

    chains: Mapping[tuple[str, str], tuple[Rule, ...] | None]
    jumps: Mapping[tuple[str, str], tuple[Rule, ...]]


def _jump_rule(jump: IptablesJump) -> Rule:
    return (*jump.match, "-m", "comment", "--comment", jump.comment, "-j", jump.target)


def _jump_targets(ruleset: IptablesRuleset, table: str) -> frozenset[str]:
    named = {jump.target for jump in ruleset.jumps if jump.table == table}
    return frozenset(ruleset.chains.get(table, {})) | named


def _same(held: tuple[Rule, ...] | None, wanted: tuple[Rule, ...] | None) -> bool:
    if held is None or wanted is None:
        return held is wanted
    return [canonical(rule) for rule in held] == [canonical(rule) for rule in wanted]


def _holds(held: _View, wanted: _View) -> bool:
    return all(_same(held.chains[key], rules) for key, rules in wanted.chains.items()) and all(
        _same(held.jumps[key], rules) for key, rules in wanted.jumps.items()
    )


def _desired(ruleset: IptablesRuleset) -> _View:
    jumps: dict[tuple[str, str], tuple[Rule, ...]] = {}
    for jump in ruleset.jumps:
        key = (jump.table, jump.chain)
        jumps[key] = (*jumps.get(key, ()), _jump_rule(jump))
    chains = {
        (table, chain): tuple(rules)
        for table, table_chains in ruleset.chains.items()
        for chain, rules in table_chains.items()
    }
    return _View(chains, jumps)


def _held(tables: Tables, ruleset: IptablesRuleset, desired: _View) -> _View:
    chains = {
        (table, chain): (tuple(tables[table][chain]) if chain in tables.get(table, {}) else None)
        for table, chain in desired.chains
    }
    targets = {table: _jump_targets(ruleset, table) for table, _ in desired.jumps}
    jumps = {
        (table, chain): tuple(
            rule for rule in tables.get(table, {}).get(chain, []) if target(rule) in targets[table]
        )
        for table, chain in desired.jumps
    }
    return _View(chains, jumps)


def _chain_diff(
    family: IPFamily, key: tuple[str, str], held: tuple[Rule, ...] | None, wanted: tuple[Rule, ...]
) -> IptablesChainDiff | None:
    """The rules only one side has, each once per surplus copy, in the side's own order."""
    if _same(held, wanted):
        return None
    have = [render_rule(canonical(rule)) for rule in held or ()]
    want = [render_rule(canonical(rule)) for rule in wanted]
    return IptablesChainDiff(
        family, *key, new=held is None, added=_surplus(want, have), removed=_surplus(have, want)
    )


def _surplus(rules: list[str], other: list[str]) -> tuple[str, ...]:
    spare = Counter(other)
    found: list[str] = []
    for rule in rules:
        if spare[rule]:
            spare[rule] -= 1
        else:
            found.append(rule)
    return tuple(found)


def _restore_text(ruleset: IptablesRuleset, held: _View, expected: tuple[_View, ...]) -> str:
    """Our chains whole, and the jumps of each built-in chain whose jumps drifted, first."""
    desired = expected[0]
    tables = sorted({table for table, _ in desired.chains} | {table for table, _ in desired.jumps})
    blocks = []
    for table in tables:
        lines = [f":{chain} - [0:0]" for chain in ruleset.chains.get(table, {})]
        for key, wanted in desired.jumps.items():
            if key[0] != table or any(_same(held.jumps[key], view.jumps[key]) for view in expected):
                continue
            lines += [f"-D {key[1]} {render_rule(rule)}" for rule in held.jumps[key]]
            lines += [f"-I {key[1]} 1 {render_rule(rule)}" for rule in reversed(wanted)]
        lines += [
            f"-A {chain} {render_rule(rule)}"
            for chain, rules in ruleset.chains.get(table, {}).items()
            for rule in rules
        ]
        blocks.append(table_block(table, lines))
    return "".join(blocks)


def _remove_text(tables: Tables, chains: Mapping[str, frozenset[str]]) -> str:
    blocks = []
    for table, names in sorted(chains.items()):
        held = tables.get(table, {})
        doomed = sorted(name for name in names if name in held and not is_builtin(table, name))
        if not doomed:
            continue
        referrers = [
            (chain, rule)
            for chain, rules in held.items()
            if chain not in doomed
            and (is_builtin(table, chain) or chain in OUR_CHAINS.get(table, ()))
            for rule in rules
            if target(rule) in doomed
        ]
        lines = [f"-D {chain} {render_rule(rule)}" for chain, rule in referrers]
        lines += [f"-F {chain}" for chain in doomed] + [f"-X {chain}" for chain in doomed]
        blocks.append(table_block(table, lines))
    return "".join(blocks)


class Iptables:
    """Our chains and jumps over any ``Netfilter``: the kernel's, or tables in memory."""

    def __init__(self, netfilter: Netfilter) -> None:
        self.netfilter = netfilter
        # family -> (the rule set's own view, what the kernel showed right after we wrote it)
        self._written: dict[IPFamily, tuple[_View, _View]] = {}

    def _tables(self, family: IPFamily) -> Tables:
        return parse_save(self.netfilter.save(family))

    def restore(self, ruleset: IptablesRuleset) -> bool:
        family = ruleset.family
        desired = _desired(ruleset)
        held = _held(self._tables(family), ruleset, desired)
        written = self._written.get(family)
        expected = (desired, written[1]) if written and written[0] == desired else (desired,)
        if any(_holds(held, view) for view in expected):
            return False
        self.netfilter.restore(family, _restore_text(ruleset, held, expected))
        self._written[family] = (desired, _held(self._tables(family), ruleset, desired))
        return True

    def read_ahead(self, family: IPFamily) -> None:
        self.netfilter.read_ahead(family)

    def diff(self, ruleset: IptablesRuleset) -> tuple[IptablesChainDiff, ...]:
        desired = _desired(ruleset)
        held = _held(self._tables(ruleset.family), ruleset, desired)
        pairs = [
            *((key, held.chains[key], rules or ()) for key, rules in desired.chains.items()),
            *((key, held.jumps[key], rules) for key, rules in desired.jumps.items()),
        ]
        found = (_chain_diff(ruleset.family, key, have, want) for key, have, want in pairs)
        return tuple(diff for diff in found if diff is not None)

    def our_chains(self, family: IPFamily) -> Mapping[str, frozenset[str]]:
        tables = self._tables(family)
        found = {
            table: frozenset(names & set(tables.get(table, {})))
            for table, names in OUR_CHAINS.items()
        }
        return {table: names for table, names in found.items() if names}

    def remove(self, family: IPFamily, chains: Mapping[str, frozenset[str]]) -> None:
        text = _remove_text(self._tables(family), chains)
        if text:
            self.netfilter.restore(family, text)


# How old a save read ahead may be: a sync's read of the kernel (a full sync's, at 10,000
# services, takes seconds); one left by a sync that never took it is not used. Backend
# detection's saves count as read ahead: detection runs inside the read or write that needs
# the backend, and its saves stand for the ones that read or write takes next.
AHEAD_SAVE_SECONDS = 60.0


class _Taken:
    """A save already done (backend detection's), taken as a save started ahead is."""

    def __init__(self, text: str) -> None:
        self._text = text

    def output(self) -> str:
        return self._text

    def discard(self) -> None:
        """Nothing runs: the text is dropped with this."""


class CommandNetfilter:
    def __init__(self, backend: str | None = None) -> None:
        self._backend = backend
        # Saves read ahead, running or done, each with when it started; each taken at most once.
        self._ahead: dict[IPFamily, tuple[float, Started | _Taken]] = {}

    @property
    def backend(self) -> str:
        if self._backend is None:
            started = time.monotonic()
            detected = detect()
            self._backend = detected.backend
            for family, text in detected.saved.items():
                self._ahead[family] = (started, _Taken(text))
        return self._backend

    def read_ahead(self, family: IPFamily) -> None:
        try:
            # Detected first: detection may itself save this family.
            backend = self.backend
            if family in self._ahead:
                return
            started = Started([binary(backend, family, "save")])
        except (IptablesError, OSError):
            # The save this was for meets the same and says so, where its failure counts.
            return
        self._ahead[family] = (time.monotonic(), started)

    def save(self, family: IPFamily) -> str:
        backend = self.backend
        ahead = self._ahead.pop(family, None)
        if ahead is not None:
            since, started = ahead
            if time.monotonic() - since < AHEAD_SAVE_SECONDS:
                return started.output()
            started.discard()
        return run([binary(backend, family, "save")])

    def restore(self, family: IPFamily, text: str) -> None:
        ahead = self._ahead.pop(family, None)
        if ahead is not None:
            ahead[1].discard()
        run([binary(self.backend, family, "restore"), "--noflush", RESTORE_WAIT], text)


class IptablesRestore(Iptables):
    """The kernel's tables through iptables-save and iptables-restore --noflush --wait.

    ``backend`` is "legacy" or "nft"; None detects it on first use as kube-proxy does.
    """

    def __init__(self, backend: str | None = None) -> None:
        super().__init__(CommandNetfilter(backend))
