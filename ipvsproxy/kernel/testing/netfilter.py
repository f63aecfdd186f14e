"""Netfilter tables in memory that take iptables-restore --noflush text as the kernel does.

The tables behind ``FakeIptables``: it refuses what legacy iptables-restore refuses (unknown
chains, targets or ipsets, deleting a missing rule, deleting a chain still referenced or not
empty) and, like it, commits table by table: a table block that fails changes nothing, the
blocks before it stay written.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection

from ipvsproxy.kernel.errors import IptablesError
from ipvsproxy.kernel.iptables.text import (
    BUILTIN_CHAINS,
    Rule,
    Tables,
    is_builtin,
    parse_rule,
    render_save,
    target,
)
from ipvsproxy.model import IPFamily

STANDARD_TARGETS = frozenset(
    {"ACCEPT", "DROP", "RETURN", "REJECT", "MASQUERADE", "MARK", "SNAT", "DNAT", "LOG"}
)


class _Refused(Exception):
    pass


def _check_rule(
    chains: dict[str, list[Rule]], rule: Rule, known_sets: Collection[str] | None
) -> None:
    jump = target(rule)
    if jump is not None and jump not in STANDARD_TARGETS and jump not in chains:
        raise _Refused(f"Couldn't load target `{jump}'")
    if known_sets is not None and "--match-set" in rule[:-1]:
        name = rule[rule.index("--match-set") + 1]
        if name not in known_sets:
            raise _Refused(f"Set {name} doesn't exist.")


def _chain(chains: dict[str, list[Rule]], name: str) -> list[Rule]:
    if name not in chains:
        raise _Refused(f"chain {name} does not exist")
    return chains[name]


def _apply(
    table: str, chains: dict[str, list[Rule]], line: str, known_sets: Collection[str] | None
) -> None:
    if line.startswith(":"):
        name = line[1:].split(maxsplit=1)[0]
        if not is_builtin(table, name):
            chains[name] = []
        return
    command, name, *rest = line.split(" ", 2)
    rule = parse_rule(rest[0]) if rest else ()
    if command == "-N":
        if name in chains:
            raise _Refused(f"chain {name} already exists")
        chains[name] = []
    elif command == "-A":
        _check_rule(chains, rule, known_sets)
        _chain(chains, name).append(rule)
    elif command == "-I":
        position = 1
        if rule and rule[0].isdigit():
            position, rule = int(rule[0]), rule[1:]
        _check_rule(chains, rule, known_sets)
        _chain(chains, name).insert(position - 1, rule)
    elif command == "-D":
        rules = _chain(chains, name)
        if rule not in rules:
            raise _Refused("Bad rule (does a matching rule exist in that chain?)")
        rules.remove(rule)
    elif command == "-F":
        _chain(chains, name).clear()
    elif command == "-X":
        if is_builtin(table, name) or _chain(chains, name):
            raise _Refused(f"chain {name} is built-in or not empty")
        if any(target(rule) == name for rules in chains.values() for rule in rules):
            raise _Refused(f"chain {name} is still referenced")
        del chains[name]
    else:
        raise _Refused(f"unknown command {command}")


class MemoryNetfilter:
    def __init__(self, ipset_names: Callable[[], Collection[str]] | None = None) -> None:
        self._ipset_names = ipset_names
        self.tables: dict[IPFamily, Tables] = {
            family: {
                table: {chain: [] for chain in BUILTIN_CHAINS[table]} for table in ("nat", "filter")
            }
            for family in IPFamily
        }
        # Saves read ahead, as the tables were then (see ``Netfilter.read_ahead``).
        self._ahead: dict[IPFamily, str] = {}

    def read_ahead(self, family: IPFamily) -> None:
        self._ahead.setdefault(family, render_save(self.tables[family]))

    def save(self, family: IPFamily) -> str:
        ahead = self._ahead.pop(family, None)
        return render_save(self.tables[family]) if ahead is None else ahead

    def restore(self, family: IPFamily, text: str) -> None:
        self._ahead.pop(family, None)
        known_sets = None if self._ipset_names is None else self._ipset_names()
        table = ""
        pending: dict[str, list[Rule]] = {}
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip() or line.startswith("#"):
                continue
            try:
                if line.startswith("*"):
                    table = line[1:].strip()
                    if table not in BUILTIN_CHAINS:
                        raise _Refused(f"can't initialize iptables table `{table}'")
                    default: dict[str, list[Rule]] = {c: [] for c in BUILTIN_CHAINS[table]}
                    pending = copy.deepcopy(self.tables[family].get(table, default))
                elif line == "COMMIT":
                    self.tables[family][table] = pending
                else:
                    _apply(table, pending, line, known_sets)
            except _Refused as refusal:
                raise IptablesError(
                    f"iptables-restore refused line {number} ({line!r}): {refusal}"
                ) from None
