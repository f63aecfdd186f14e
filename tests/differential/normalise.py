"""Two captures made comparable, and compared (pure).

Each tool's text becomes a value that ignores only what means nothing (counters, a set's
random hash seed, a link's MAC address, iptables comments, line order where the kernel keeps
none) and keeps everything that changes what a packet meets: virtual servers with their
scheduler, flags, persistence and each real server's forwarding and weight; kube-ipvs0's
kind, state and addresses; each ipset's type, family, options and members; every rule of every
KUBE-* chain in order, and of the built-in chains that jump to them; the IPVS timeouts and
the sysctls. Our node's values are first mapped to the twins on kube-proxy's node.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from tests.differential.capture import Capture

_IPV4 = re.compile(r"(?<![\w.])(\d{1,3}(?:\.\d{1,3}){3})(/\d{1,2})?(?![\w.])")
_IPV6 = re.compile(r"(?<![\w:.])([0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7})(/\d{1,3})?(?![\w:])")
_INITVAL = re.compile(r" initval 0x[0-9a-f]+")
_COUNTERS = re.compile(r"\[\d+:\d+\]")


@dataclass(frozen=True, order=True)
class Difference:
    """One thing the two nodes hold differently: ``kube_proxy`` and ``ours`` as text, each
    "(none)" where that node has nothing of ``subject``."""

    section: str
    subject: str
    kube_proxy: str
    ours: str

    def __str__(self) -> str:
        return (
            f"{self.section}: {self.subject}\n"
            f"    kube-proxy: {self.kube_proxy}\n"
            f"    ipvsproxy:  {self.ours}"
        )


def map_addresses(text: str, mapping: Callable[[str], str]) -> str:
    """``text`` with every IPv4 and IPv6 address (or CIDR) in it replaced by ``mapping``'s."""

    def replace(match: re.Match[str]) -> str:
        address, prefix = match.group(1), match.group(2) or ""
        try:
            ipaddress.ip_address(address)
        except ValueError:
            return match.group(0)
        return mapping(address + prefix)

    return _IPV6.sub(replace, _IPV4.sub(replace, text))


@dataclass(frozen=True)
class State:
    """One node's proxy state in comparable form."""

    # "-t ADDRESS:PORT" -> (the virtual server's own line, its real servers' lines)
    ipvs: Mapping[str, tuple[str, frozenset[str]]]
    timeouts: str
    # set name -> (its create line without the hash seed, its members)
    ipsets: Mapping[str, tuple[str, frozenset[str]]]
    # "FAMILY TABLE CHAIN" -> rules in order, comments aside; KUBE-* and built-in chains
    chains: Mapping[str, tuple[str, ...]]
    interface: tuple[str, frozenset[str]]
    sysctls: Mapping[str, str]


def _ipvs(text: str) -> dict[str, tuple[str, frozenset[str]]]:
    servers: dict[str, str] = {}
    reals: dict[str, set[str]] = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) < 3:
            continue
        key = f"{words[1]} {words[2]}"
        if words[0] == "-A":
            servers[key] = " ".join(words[3:])
            reals.setdefault(key, set())
        elif words[0] == "-a":
            reals.setdefault(key, set()).add(" ".join(words[3:]))
        else:
            servers[line] = ""
    return {
        key: (servers.get(key, "(none)"), frozenset(reals.get(key, ()))) for key in servers | reals
    }


def _ipsets(text: str) -> dict[str, tuple[str, frozenset[str]]]:
    creates: dict[str, str] = {}
    members: dict[str, set[str]] = {}
    for line in text.splitlines():
        words = line.split(" ", 2)
        if len(words) < 3:
            continue
        if words[0] == "create":
            creates[words[1]] = _INITVAL.sub("", words[2])
            members.setdefault(words[1], set())
        elif words[0] == "add":
            members.setdefault(words[1], set()).add(words[2])
    return {name: (creates.get(name, "(none)"), frozenset(members[name])) for name in members}


def _without_comments(rule: str) -> str:
    words = shlex.split(rule)
    kept: list[str] = []
    index = 0
    while index < len(words):
        if words[index : index + 2] == ["-m", "comment"] and words[index + 2 : index + 3] == [
            "--comment"
        ]:
            index += 4
            continue
        kept.append(shlex.quote(words[index]))
        index += 1
    return " ".join(kept)


_TERMINAL = frozenset({"ACCEPT", "DROP", "RETURN", "REJECT"})


def _verdict(rule: str) -> str | None:
    """A rule's target and its options when the target ends the chain's walk, else None."""
    target = rule.rpartition(" -j ")[2] if " -j " in f" {rule}" else ""
    return target if target.split()[:1] and target.split()[0] in _TERMINAL else None


def verdict_order(rules: Iterable[str]) -> tuple[str, ...]:
    """``rules`` with each run of neighbours that end in the same verdict sorted: their order
    changes no packet's fate (kube-proxy writes some of them in Go's random map order)."""
    ordered: list[str] = []
    run: list[str] = []
    for rule in rules:
        if run and _verdict(rule) is not None and _verdict(rule) == _verdict(run[0]):
            run.append(rule)
            continue
        ordered += sorted(run)
        run = [rule]
    return tuple(ordered + sorted(run))


def _chains(family: str, text: str) -> dict[str, tuple[str, ...]]:
    """Our chains and the built-in ones (whose only rules here are the proxies' jumps)."""
    chains: dict[str, list[str]] = {}
    table = ""
    for line in text.splitlines():
        if line.startswith("*"):
            table = line[1:].strip()
        elif line.startswith(":"):
            chain = line[1:].split()[0]
            policy = _COUNTERS.sub("", line.split(maxsplit=1)[1] if " " in line else "").strip()
            chains.setdefault(f"{family} {table} {chain}", [])
            if policy != "-":
                chains[f"{family} {table} {chain}"].append(f"(policy {policy})")
        elif line.startswith("-A "):
            _, chain, rule = [*line.split(" ", 2), ""][:3]
            chains.setdefault(f"{family} {table} {chain}", []).append(_without_comments(rule))
        elif line.startswith("! "):
            chains.setdefault(f"{family} {table} (error)", []).append(line)
    return {
        key: verdict_order(rules)
        for key, rules in chains.items()
        if key.split()[2].startswith("KUBE-") or any(not r.startswith("(policy") for r in rules)
    }


def _interface(text: str) -> tuple[str, frozenset[str]]:
    link = "(none)"
    addresses: set[str] = set()
    for line in text.splitlines():
        words = line.split()
        if line.startswith("!"):
            link = line
        elif len(words) > 3 and words[2] in ("inet", "inet6"):
            addresses.add(words[3])
        elif len(words) > 2 and words[1].rstrip(":") == "kube-ipvs0":
            link = " ".join(
                word
                for index, word in enumerate(words[2:], 2)
                if not re.fullmatch(r"([0-9a-f]{2}:){5}[0-9a-f]{2}", word)
                and words[index - 1] not in ("numtxqueues", "numrxqueues", "gso_max_size")
            )
    return link, frozenset(addresses)


def normalise(capture: Capture, mapping: Callable[[str], str] | None = None) -> State:
    def mapped(text: str) -> str:
        return map_addresses(text, mapping) if mapping is not None else text

    return State(
        ipvs=_ipvs(mapped(capture.ipvs)),
        timeouts=capture.timeouts.strip(),
        ipsets=_ipsets(mapped(capture.ipsets)),
        chains={
            **_chains("IPv4", mapped(capture.iptables)),
            **_chains("IPv6", mapped(capture.ip6tables)),
        },
        interface=_interface(mapped(capture.interface)),
        sysctls=dict(capture.sysctls),
    )


def _text(items: Iterable[str]) -> str:
    found = sorted(items)
    return "; ".join(found) if found else "(none)"


def _keyed(
    section: str,
    kube: Mapping[str, tuple[str, frozenset[str]]],
    ours: Mapping[str, tuple[str, frozenset[str]]],
    member_word: str,
) -> list[Difference]:
    """Per key: a whole object on one side only, or its own line or members differing."""
    found = []
    for key in sorted(kube.keys() | ours.keys()):
        theirs, mine = kube.get(key), ours.get(key)
        if theirs == mine:
            continue
        if theirs is None or mine is None:
            present = theirs or mine
            assert present is not None
            described = f"{present[0]} {member_word} {_text(present[1])}"
            found.append(
                Difference(
                    section,
                    key,
                    described if theirs else "(none)",
                    described if mine else "(none)",
                )
            )
            continue
        if theirs[0] != mine[0]:
            found.append(Difference(section, key, theirs[0], mine[0]))
        if theirs[1] != mine[1]:
            found.append(
                Difference(
                    section,
                    f"{key} {member_word}",
                    _text(theirs[1] - mine[1]) + " (only here)",
                    _text(mine[1] - theirs[1]) + " (only here)",
                )
            )
    return found


def compare(kube: State, ours: State) -> list[Difference]:
    """Every difference between kube-proxy's node and ours, one per object."""
    found = _keyed("ipvs", kube.ipvs, ours.ipvs, "real servers")
    if kube.timeouts != ours.timeouts:
        found.append(Difference("ipvs timeouts", "tcp tcpfin udp", kube.timeouts, ours.timeouts))
    found += _keyed("ipset", kube.ipsets, ours.ipsets, "members")
    for key in sorted(kube.chains.keys() | ours.chains.keys()):
        theirs, mine = kube.chains.get(key), ours.chains.get(key)
        if theirs != mine:
            found.append(
                Difference(
                    "iptables",
                    key,
                    " | ".join(theirs) if theirs is not None else "(none)",
                    " | ".join(mine) if mine is not None else "(none)",
                )
            )
    if kube.interface[0] != ours.interface[0]:
        found.append(Difference("kube-ipvs0", "link", kube.interface[0], ours.interface[0]))
    if kube.interface[1] != ours.interface[1]:
        found.append(
            Difference(
                "kube-ipvs0",
                "addresses",
                _text(kube.interface[1] - ours.interface[1]) + " (only here)",
                _text(ours.interface[1] - kube.interface[1]) + " (only here)",
            )
        )
    for name in sorted(kube.sysctls.keys() | ours.sysctls.keys()):
        if kube.sysctls.get(name) != ours.sysctls.get(name):
            found.append(
                Difference(
                    "sysctl",
                    name,
                    kube.sysctls.get(name, "(none)"),
                    ours.sysctls.get(name, "(none)"),
                )
            )
    return found
