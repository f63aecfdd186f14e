from __future__ import annotations

from pathlib import Path

import pytest

from ipvsproxy.kernel.preconditions import PreconditionError, check_ipvs
from ipvsproxy.kernel.sysctl import FakeSysctl, ProcSysctl


def machine(tmp_path: Path, *, ipvs: bool, schedulers: tuple[str, ...] = ()) -> dict[str, Path]:
    (tmp_path / "proc" / "net").mkdir(parents=True)
    if ipvs:
        (tmp_path / "proc" / "net" / "ip_vs").write_text("")
    for scheduler in schedulers:
        (tmp_path / "module" / f"ip_vs_{scheduler}").mkdir(parents=True)
    return {"proc": tmp_path / "proc", "modules": tmp_path / "module"}


def test_a_machine_with_ipvs_and_the_scheduler_passes(tmp_path: Path) -> None:
    check_ipvs(["rr"], euid=0, **machine(tmp_path, ipvs=True, schedulers=("rr",)))


@pytest.mark.parametrize(
    ("ipvs", "euid", "message"),
    [
        (True, 1000, "must run as root"),
        (False, 0, "the ip_vs kernel module is not loaded; run modprobe ip_vs"),
    ],
)
def test_each_lack_is_one_line(tmp_path: Path, ipvs: bool, euid: int, message: str) -> None:
    with pytest.raises(PreconditionError, match=message) as raised:
        check_ipvs(["rr"], euid=euid, **machine(tmp_path, ipvs=ipvs, schedulers=("rr",)))
    assert "\n" not in str(raised.value)


def test_missing_schedulers_are_named(tmp_path: Path) -> None:
    with pytest.raises(PreconditionError, match=r"run modprobe ip_vs_mh ip_vs_sh$"):
        check_ipvs(["rr", "sh", "mh"], euid=0, **machine(tmp_path, ipvs=True, schedulers=("rr",)))


@pytest.mark.parametrize("kind", ["proc", "fake"])
def test_sysctl_reads_writes_and_refuses_unknown_names(tmp_path: Path, kind: str) -> None:
    name = "net.ipv4.vs.conntrack"
    if kind == "proc":
        (tmp_path / "net" / "ipv4" / "vs").mkdir(parents=True)
        (tmp_path / "net" / "ipv4" / "vs" / "conntrack").write_text("0\n")
        sysctl: ProcSysctl | FakeSysctl = ProcSysctl(tmp_path)
    else:
        sysctl = FakeSysctl({name: "0"})
    sysctl.set(name, "1")
    assert sysctl.get(name) == "1"
    assert sysctl.get("net.ipv4.vs.nothing") is None
    with pytest.raises(FileNotFoundError):
        sysctl.set("net.ipv4.vs.nothing", "1")
