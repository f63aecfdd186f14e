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


_HEADER_OPTIONS = ("-s", "-d", "-i", "-o", "-p")
_NEGATED_HEADERS = {(option,) for option in _HEADER_OPTIONS}
_MARK_OPTIONS = {"--or-mark": "{0}/{0}", "--xor-mark": "{0}/0x0", "--set-mark": "{0}/0xffffffff"}


def _host_prefix(address: str) -> str:
    if "/" in address:
        return address
    return f"{address}/128" if ":" in address else f"{address}/32"


def canonical(rule: Rule) -> Rule:
    """A rule as iptables-save prints it back: header matches (-s -d -i -o -p) first, in
    that order, addresses with their prefix length, and MARK's shorthands as --set-xmark."""
    header: dict[str, Rule] = {}
    rest: list[str] = []
    index = 0
    while index < len(rule):
        negated = rule[index] == "!" and rule[index + 1 : index + 2] in _NEGATED_HEADERS
        option = rule[index + 1] if negated else rule[index]
        if option in _HEADER_OPTIONS and index + 1 + negated < len(rule):
            value = rule[index + 1 + negated]
            value = _host_prefix(value) if option in {"-s", "-d"} else value
            header[option] = ("!", option, value) if negated else (option, value)
            index += 2 + negated
            continue
        rest.append(rule[index])
        index += 1
    if "MARK" in rest and rest[rest.index("MARK") - 1] in {"-j", "--jump"}:
        for shorthand, form in _MARK_OPTIONS.items():
            if shorthand in rest[:-1]:
                at = rest.index(shorthand)
                rest[at : at + 2] = ["--set-xmark", form.format(hex(int(rest[at + 1], 0)))]
    return (*(part for o in _HEADER_OPTIONS for part in header.get(o, ())), *rest)
