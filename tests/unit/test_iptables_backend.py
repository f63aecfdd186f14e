"""Backend choice as iptables-wrappers makes it, iptables' complaints in one line, and how the
commands are started."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from ipvsproxy.kernel.errors import IptablesError
from ipvsproxy.kernel.iptables.backend import Probe, choose_backend, probe_of
from ipvsproxy.kernel.iptables.command import refusal, run
from ipvsproxy.kernel.iptables.restore import CommandNetfilter, IptablesRestore
from ipvsproxy.model import IPFamily

DOWN = Probe(unusable="iptables-x-save failed: oops")


@pytest.mark.parametrize(
    ("nft", "legacy", "chosen"),
    [
        (Probe(hint_chains=1), Probe(rule_lines=50), "nft"),
        (Probe(rule_lines=50), Probe(hint_chains=1), "legacy"),
        (Probe(rule_lines=3), Probe(rule_lines=4), "legacy"),
        (Probe(rule_lines=4), Probe(rule_lines=4), "nft"),
        (Probe(), Probe(), "nft"),
        (DOWN, Probe(), "legacy"),
        (Probe(rule_lines=1), DOWN, "nft"),
        (DOWN, Probe(rule_lines=0), "legacy"),
    ],
)
def test_choose_backend(nft: Probe, legacy: Probe, chosen: str) -> None:
    assert choose_backend({"nft": nft, "legacy": legacy}) == chosen


def test_no_working_backend_is_one_clear_error_with_each_reason() -> None:
    with pytest.raises(IptablesError) as refused:
        choose_backend({"nft": DOWN, "legacy": Probe(unusable="lock held")})

    assert str(refused.value) == (
        "no iptables backend can write the nat table "
        "(nft: iptables-x-save failed: oops; legacy: lock held)"
    )


def test_probe_counts_kubelet_hints_and_rules_over_both_families() -> None:
    v4 = "*mangle\n:KUBE-IPTABLES-HINT - [0:0]\nCOMMIT\n*nat\n-A PREROUTING -j ACCEPT\nCOMMIT\n"
    v6 = "*nat\n:KUBE-KUBELET-CANARY - [0:0]\n-A OUTPUT -j ACCEPT\n-A OUTPUT -j DROP\nCOMMIT\n"

    assert probe_of([v4, v6]) == Probe(hint_chains=2, rule_lines=3)


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
    """iptables binaries as shell scripts that log each start: nft saves but cannot write."""

    def __init__(self, folder: Path) -> None:
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
                        + ("printf '*nat\\nCOMMIT\\n'\n" if tool == "save" else "")
                    )
                    script.chmod(0o755)

    def started(self) -> list[str]:
        return self.log.read_text().split() if self.log.exists() else []


def test_the_save_that_follows_backend_detection_reads_what_detection_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands = _Commands(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))
    iptables = IptablesRestore()

    iptables.our_chains(IPFamily.IPV4)
    iptables.our_chains(IPFamily.IPV6)
    detection = commands.started()
    assert detection == [
        "iptables-nft-save",
        "iptables-nft-restore",
        "iptables-legacy-save",
        "iptables-legacy-restore",
        "ip6tables-legacy-save",
    ]
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

    assert commands.started() == [
        "iptables-nft-save",
        "iptables-nft-restore",
        "iptables-legacy-save",
        "iptables-legacy-restore",
        "ip6tables-legacy-save",
    ]
    # Past the read-ahead bound, a detection's save no longer stands for the kernel.
    later = CommandNetfilter()
    later.read_ahead(IPFamily.IPV4)
    now[0] += 61
    later.save(IPFamily.IPV6)
    assert commands.started()[-1:] == ["ip6tables-legacy-save"]
    assert len(commands.started()) == 11


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
