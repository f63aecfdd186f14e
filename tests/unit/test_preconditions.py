from __future__ import annotations

from pathlib import Path

import pytest

from ipvsproxy.kernel.errors import PreconditionError
from ipvsproxy.kernel.preconditions import check_ipvs
from ipvsproxy.kernel.sysctl import FakeSysctl, ProcSysctl

ROOT_CAPS = "000001ffffffffff"
# Everything root has but CAP_NET_ADMIN (bit 12): root in a container without NET_ADMIN.
ROOT_WITHOUT_NET_ADMIN = f"{0x1FFFFFFFFFF & ~(1 << 12):016x}"
ONLY_NET_ADMIN = f"{1 << 12:016x}"


def machine(
    tmp_path: Path, *, ipvs: bool, schedulers: tuple[str, ...] = (), caps: str = ROOT_CAPS
) -> dict[str, Path]:
    (tmp_path / "proc" / "net").mkdir(parents=True)
    (tmp_path / "proc" / "self").mkdir()
    (tmp_path / "proc" / "self" / "status").write_text(
        f"Name:\tipvsproxy\nCapInh:\t0000000000000000\nCapPrm:\t{caps}\nCapEff:\t{caps}\n"
    )
    if ipvs:
        (tmp_path / "proc" / "net" / "ip_vs").write_text("")
    for scheduler in schedulers:
        (tmp_path / "module" / f"ip_vs_{scheduler}").mkdir(parents=True)
    return {"proc": tmp_path / "proc", "modules": tmp_path / "module"}


def test_a_machine_with_ipvs_and_the_scheduler_passes(tmp_path: Path) -> None:
    check_ipvs(["rr"], **machine(tmp_path, ipvs=True, schedulers=("rr",)))


def test_net_admin_alone_is_enough(tmp_path: Path) -> None:
    check_ipvs(["rr"], **machine(tmp_path, ipvs=True, schedulers=("rr",), caps=ONLY_NET_ADMIN))


@pytest.mark.parametrize(
    ("ipvs", "caps", "message"),
    [
        (True, "0000000000000000", "needs CAP_NET_ADMIN"),
        (True, ROOT_WITHOUT_NET_ADMIN, "needs CAP_NET_ADMIN"),
        (False, ROOT_CAPS, "the ip_vs kernel module is not loaded; run modprobe ip_vs"),
    ],
)
def test_each_lack_is_one_line(tmp_path: Path, ipvs: bool, caps: str, message: str) -> None:
    with pytest.raises(PreconditionError, match=message) as raised:
        check_ipvs(["rr"], **machine(tmp_path, ipvs=ipvs, schedulers=("rr",), caps=caps))
    assert "\n" not in str(raised.value)


def test_missing_schedulers_are_named(tmp_path: Path) -> None:
    with pytest.raises(PreconditionError, match=r"run modprobe ip_vs_mh ip_vs_sh$"):
        check_ipvs(["rr", "sh", "mh"], **machine(tmp_path, ipvs=True, schedulers=("rr",)))


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
