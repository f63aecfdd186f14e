"""The iptables-save / iptables-restore text format: read into tables, written from rules.

A rule is its argument tuple without ``-A CHAIN``, tokenized as a shell would
(``--comment "two words"`` is one argument), so rules compare by value whatever quoting
the text used.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence

Rule = tuple[str, ...]
# table -> chain -> rules in order; every declared chain is present, built-in or not.
Tables = dict[str, dict[str, list[Rule]]]

BUILTIN_CHAINS: Mapping[str, tuple[str, ...]] = {
    "filter": ("INPUT", "FORWARD", "OUTPUT"),
    "nat": ("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"),
    "mangle": ("PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"),
    "raw": ("PREROUTING", "OUTPUT"),
    "security": ("INPUT", "FORWARD", "OUTPUT"),
}

_NEEDS_QUOTES = re.compile(r'[\s"\'\\]')


class IptablesError(Exception):
    """iptables refused an operation or could not run; the message is one line."""


def is_builtin(table: str, chain: str) -> bool:
    return chain in BUILTIN_CHAINS.get(table, ())


def quote(argument: str) -> str:
    if argument and not _NEEDS_QUOTES.search(argument):
        return argument
    escaped = argument.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def render_rule(rule: Rule) -> str:
    return " ".join(quote(argument) for argument in rule)


def parse_rule(text: str) -> Rule:
    return tuple(shlex.split(text))


def target(rule: Rule) -> str | None:
    """The chain or target a rule jumps (-j) or goes (-g) to."""
    for flag in ("-j", "--jump", "-g", "--goto"):
        if flag in rule[:-1]:
            return rule[rule.index(flag) + 1]
    return None


def parse_save(text: str) -> Tables:
    tables: Tables = {}
    chains: dict[str, list[Rule]] = {}
    for line in text.splitlines():
        if line.startswith("*"):
            chains = tables.setdefault(line[1:].strip(), {})
        elif line.startswith(":"):
            chains.setdefault(line[1:].split()[0], [])
        elif line.startswith("-A "):
            _, chain, *rest = line.split(" ", 2)
            chains.setdefault(chain, []).append(parse_rule(rest[0] if rest else ""))
    return tables


def render_save(tables: Mapping[str, Mapping[str, Sequence[Rule]]]) -> str:
    """Tables as iptables-save prints them (built-in chains first, counters zero)."""
    lines: list[str] = []
    for table, chains in tables.items():
        lines.append(f"*{table}")
        declared = [c for c in BUILTIN_CHAINS.get(table, ()) if c in chains]
        declared += sorted(c for c in chains if not is_builtin(table, c))
        lines += [
            f":{chain} {'ACCEPT' if is_builtin(table, chain) else '-'} [0:0]" for chain in declared
        ]
        lines += [f"-A {chain} {render_rule(rule)}" for chain in declared for rule in chains[chain]]
        lines.append("COMMIT")
    return "".join(f"{line}\n" for line in lines)


def table_block(table: str, lines: Iterable[str]) -> str:
    return "".join(f"{line}\n" for line in (f"*{table}", *lines, "COMMIT"))
