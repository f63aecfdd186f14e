"""Backend choice as iptables-wrappers makes it, iptables' complaints in one line, and how the
commands are started."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ipvsproxy.kernel.errors import IptablesError
from ipvsproxy.kernel.iptables.backend import (
    choose_backend,
    detect,
    hint_chains,
    holds_created_nat_chain,
    rule_lines,
)
from ipvsproxy.kernel.iptables.command import refusal, run
from ipvsproxy.kernel.iptables.restore import CommandNetfilter, IptablesRestore
from ipvsproxy.model import IPFamily

DOWN = None  # a flavour whose IPv4 save fails


def _saved(*, hints: int = 0, rules: int = 0, nat_chain: bool = False) -> str:
    """A save holding ``hints`` kubelet hint chains, ``rules`` rules, and maybe a nat chain."""
    return (
        "*mangle\n"
        + ":KUBE-IPTABLES-HINT - [0:0]\n" * hints
        + "-A PREROUTING -j ACCEPT\n" * rules
        + "COMMIT\n*nat\n:PREROUTING ACCEPT [0:0]\n"
        + ":KUBE-SERVICES - [0:0]\n" * nat_chain
        + "COMMIT\n"
    )


@dataclass
class _Flavours:
    """Each backend's IPv4 save (None: it fails) and IPv6 save as a test gives them; records
    what the choice asked."""

    v4: dict[str, str | None]
    v6: dict[str, str] = field(default_factory=dict)
    refuse_writes: frozenset[str] = frozenset()
    asked: list[str] = field(default_factory=list)

    def saved(self, backend: str, family: IPFamily) -> str | None:
        self.asked.append(f"{backend} {family.name}")
        return self.v4[backend] if family is IPFamily.IPV4 else self.v6.get(backend)

    def unreadable(self, backend: str) -> str:
        return "" if self.v4[backend] is not None else f"iptables-{backend}-save failed: oops"

    def unwritable(self, backend: str) -> str:
        self.asked.append(f"{backend} write")
        return "nat refused" if backend in self.refuse_writes else ""


@pytest.mark.parametrize(
    ("nft", "legacy", "refuse_writes", "chosen"),
    [
        (_saved(hints=1), _saved(rules=50), "", "nft"),
        (_saved(rules=50), _saved(hints=1), "", "legacy"),
        (_saved(rules=3), _saved(rules=4), "", "legacy"),
        (_saved(rules=4), _saved(rules=4), "", "nft"),
        (_saved(), _saved(), "", "nft"),
        (DOWN, _saved(), "", "legacy"),
        (_saved(rules=1), DOWN, "", "nft"),
        (DOWN, _saved(rules=0), "", "legacy"),
        # A flavour that cannot write nat is passed over, hinted or holding more rules.
        (_saved(hints=1), _saved(), "nft", "legacy"),
        (_saved(), _saved(), "nft", "legacy"),
        (_saved(rules=1), _saved(rules=4), "legacy", "nft"),
        (_saved(rules=9), _saved(rules=4), "nft", "legacy"),
    ],
)
def test_choose_backend(
    nft: str | None, legacy: str | None, refuse_writes: str, chosen: str
) -> None:
    flavours = _Flavours({"nft": nft, "legacy": legacy}, refuse_writes=frozenset({refuse_writes}))
    assert choose_backend(flavours) == chosen


def test_hints_and_rules_count_over_both_families() -> None:
    flavours = _Flavours(
        {"nft": _saved(rules=2), "legacy": _saved(rules=2)}, {"legacy": _saved(rules=1)}
    )
    assert choose_backend(flavours) == "legacy"
    ipv6_hint = _Flavours({"nft": _saved(rules=5), "legacy": _saved()}, {"legacy": _saved(hints=1)})
    assert choose_backend(ipv6_hint) == "legacy"


def test_a_flavour_kubelet_hinted_in_ipv4_is_chosen_without_asking_of_the_other() -> None:
    flavours = _Flavours({"nft": _saved(hints=1), "legacy": _saved(rules=50)})

    assert choose_backend(flavours) == "nft"
    assert flavours.asked == ["nft IPV4", "nft write"]


def test_legacy_with_more_rules_is_chosen_without_probing_whether_nft_writes() -> None:
    flavours = _Flavours(
        {"nft": _saved(), "legacy": _saved(rules=4)}, refuse_writes=frozenset({"nft"})
    )

    assert choose_backend(flavours) == "legacy"
    assert "nft write" not in flavours.asked


def test_no_working_backend_is_one_clear_error_with_each_reason() -> None:
    with pytest.raises(IptablesError) as refused:
        choose_backend(
            _Flavours({"nft": DOWN, "legacy": _saved()}, refuse_writes=frozenset({"legacy"}))
        )

    assert str(refused.value) == (
        "no iptables backend can write the nat table "
        "(nft: iptables-nft-save failed: oops; legacy: nat refused)"
    )


def test_counts_of_kubelet_hints_and_rules_and_a_created_nat_chain() -> None:
    v4 = "*mangle\n:KUBE-IPTABLES-HINT - [0:0]\nCOMMIT\n*nat\n-A PREROUTING -j ACCEPT\nCOMMIT\n"
    v6 = "*nat\n:KUBE-KUBELET-CANARY - [0:0]\n-A OUTPUT -j ACCEPT\n-A OUTPUT -j DROP\nCOMMIT\n"

    assert (hint_chains([v4, v6]), rule_lines([v4, v6])) == (2, 3)
    assert not holds_created_nat_chain(v4)
    assert holds_created_nat_chain(v6)
    # A chain of another table is no sign that nat can be written.
    assert not holds_created_nat_chain("*filter\n:KUBE-FIREWALL - [0:0]\nCOMMIT\n*nat\nCOMMIT\n")


def test_refusal_is_one_line_naming_the_input_line() -> None:
    stderr = (
        "iptables-restore v1.8.9 (legacy): Set NOSET doesn't exist.\n\n"
        "Error occurred at line: 2\nTry `iptables-restore -h' for more information.\n"
    )

    assert refusal(stderr, "*nat\n-A X -m set --match-set NOSET dst\nCOMMIT\n") == (
        "iptables-restore v1.8.9 (legacy): Set NOSET doesn't exist.; Error occurred at line: 2; "
        "input: -A X -m set --match-set NOSET dst"
    )
    assert refusal("iptables-restore: line 9 failed\n", "*nat\n") == (
        "iptables-restore: line 9 failed"
    )
    assert refusal("", "") == "no message"


def test_a_missing_binary_is_one_clear_error() -> None:
    with pytest.raises(IptablesError, match=r"^iptables-nosuch-save is not installed"):
        IptablesRestore(backend="nosuch").our_chains(IPFamily.IPV4)


def test_a_command_is_started_by_the_path_found_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tool = tmp_path / "iptables-fake-save"
    tool.write_text("#!/bin/sh\necho saved\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    started: list[list[str]] = []
    real_popen = subprocess.Popen

    def recording_popen(args: list[str], **options: Any) -> subprocess.Popen[str]:
        started.append(args)
        return real_popen(args, **options)

    monkeypatch.setattr(subprocess, "Popen", recording_popen)

    assert run(["iptables-fake-save", "-t", "nat"]) == "saved\n"
    assert started == [[str(tool), "-t", "nat"]]


class _Commands:
    """iptables binaries as shell scripts that log each start: nft saves but cannot write;
    each backend's saves print what ``saved`` gives it (else empty tables)."""

    def __init__(self, folder: Path, saved: dict[str, str] | None = None) -> None:
        self.log = folder / "started"
        for family in ("iptables", "ip6tables"):
            for backend in ("nft", "legacy"):
                for tool in ("save", "restore"):
                    script = folder / f"{family}-{backend}-{tool}"
                    refuse = backend == "nft" and tool == "restore"
                    script.write_text(
                        f'#!/bin/sh\necho {script.name} >> "{self.log}"\n'
                        + (
                            "exit 1\n"
                            if refuse
                            else "while read -r _; do :; done\n" * (tool == "restore")
                        )
                        + (
                            f"printf '%s' '{(saved or {}).get(backend, EMPTY)}'\n"
                            * (tool == "save")
                        )
                    )
                    script.chmod(0o755)

    def started(self) -> list[str]:
        return self.log.read_text().split() if self.log.exists() else []


EMPTY = "*nat\nCOMMIT\n"
# Both saves of each (the rules are counted over both families), then each write probe: nft's
# refused, legacy's passes.
DETECTION_ON_EMPTY_TABLES = [
    "iptables-nft-save",
    "ip6tables-nft-save",
    "iptables-legacy-save",
    "ip6tables-legacy-save",
    "iptables-nft-restore",
    "iptables-legacy-restore",
]


KUBELET_HINTED_NFT = "*nat\n:KUBE-KUBELET-CANARY - [0:0]\nCOMMIT\n"
OUR_LEGACY_CHAINS = "*nat\n:KUBE-SERVICES - [0:0]\n-A PREROUTING -j KUBE-SERVICES\nCOMMIT\n"


@pytest.mark.parametrize(
    ("saved", "chosen", "started"),
    [
        # Kubelet's canary in nat shows that nft writes nat: no probe, no legacy command.
        ({"nft": KUBELET_HINTED_NFT}, "nft", ["iptables-nft-save"]),
        # Legacy holds more rules and chains in nat: neither flavour is write-probed.
        ({"legacy": OUR_LEGACY_CHAINS}, "legacy", DETECTION_ON_EMPTY_TABLES[:4]),
    ],
)
def test_detection_starts_only_the_commands_whose_answer_counts(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    saved: dict[str, str],
    chosen: str,
    started: list[str],
) -> None:
    commands = _Commands(tmp_path, saved)
    monkeypatch.setenv("PATH", str(tmp_path))

    detected = detect()
    assert (detected.backend, detected.saved[IPFamily.IPV4]) == (chosen, saved[chosen])
    assert commands.started() == started


def test_the_save_that_follows_backend_detection_reads_what_detection_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands = _Commands(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))
    iptables = IptablesRestore()

    iptables.our_chains(IPFamily.IPV4)
    iptables.our_chains(IPFamily.IPV6)
    detection = commands.started()
    assert detection == DETECTION_ON_EMPTY_TABLES
    # Later reads are the kernel's own, each a save of its own.
    iptables.our_chains(IPFamily.IPV4)
    assert commands.started() == [*detection, "iptables-legacy-save"]


def test_a_sync_that_reads_ahead_takes_detections_saves_even_after_a_long_ipvs_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands = _Commands(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    netfilter = CommandNetfilter()

    # As a sync reads ahead before it dumps IPVS: the first read ahead detects the backend.
    netfilter.read_ahead(IPFamily.IPV4)
    netfilter.read_ahead(IPFamily.IPV6)
    now[0] += 30  # a 10,000-service IPVS dump in the lab
    netfilter.save(IPFamily.IPV4)
    netfilter.save(IPFamily.IPV6)

    assert commands.started() == DETECTION_ON_EMPTY_TABLES
    # Past the read-ahead bound, a detection's save no longer stands for the kernel.
    later = CommandNetfilter()
    later.read_ahead(IPFamily.IPV4)
    now[0] += 61
    later.save(IPFamily.IPV6)
    assert commands.started()[-1:] == ["ip6tables-legacy-save"]
    assert len(commands.started()) == 2 * len(DETECTION_ON_EMPTY_TABLES) + 1


def _counting_commands(folder: Path) -> Path:
    """iptables-legacy-save and -restore as scripts: each save logs its start and prints how
    many restores came before it; returns the log."""
    log, restores = folder / "saves", folder / "restores"
    restores.touch()
    save = folder / "iptables-legacy-save"
    save.write_text(
        f'#!/bin/sh\necho save >> "{log}"\n'
        f"printf '*nat\\n# restores: %s\\nCOMMIT\\n' \"$(wc -l < {restores})\"\n"
    )
    restore = folder / "iptables-legacy-restore"
    restore.write_text(f'#!/bin/sh\ncat > /dev/null\necho restore >> "{restores}"\n')
    for script in (save, restore):
        script.chmod(0o755)
    return log


def test_a_save_read_ahead_is_the_next_save_unless_a_restore_comes_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _counting_commands(tmp_path)
    # First on the path; the scripts use the system's tools.
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    netfilter = CommandNetfilter("legacy")

    netfilter.read_ahead(IPFamily.IPV4)
    netfilter.read_ahead(IPFamily.IPV4)
    assert "# restores: 0" in netfilter.save(IPFamily.IPV4)
    # One save, started ahead and taken: none started by the save itself.
    assert log.read_text().split() == ["save"]

    netfilter.read_ahead(IPFamily.IPV4)
    netfilter.restore(IPFamily.IPV4, "*nat\nCOMMIT\n")
    # Read again after the restore, not the save started before it.
    assert "# restores: 1" in netfilter.save(IPFamily.IPV4)


def test_a_save_that_cannot_be_read_ahead_fails_where_it_is_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    netfilter = CommandNetfilter("legacy")
    netfilter.read_ahead(IPFamily.IPV4)
    with pytest.raises(IptablesError, match="iptables-legacy-save is not installed"):
        netfilter.save(IPFamily.IPV4)
