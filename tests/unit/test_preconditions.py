from __future__ import annotations

from pathlib import Path

import pytest

from ipvsproxy.kernel.errors import PreconditionError
from ipvsproxy.kernel.preconditions import (
    PROBE_ADDRESS,
    PROBE_PORTS,
    check_schedulers,
    require_net_admin,
)
from ipvsproxy.kernel.sysctl import ProcSysctl
from ipvsproxy.kernel.testing import FakeIPVS, FakeSysctl
from ipvsproxy.model import AddVirtualServer, TransportProtocol, VirtualServer, VirtualServerKey


def probe_key(port: int) -> VirtualServerKey:
    return VirtualServerKey(TransportProtocol.TCP, PROBE_ADDRESS, port)


def test_schedulers_the_kernel_accepts_pass_and_leave_no_trace() -> None:
    ipvs = FakeIPVS()
    check_schedulers(ipvs, ["rr", "wlc", "mh"])
    assert ipvs.dump() == {}


def test_a_refused_scheduler_is_one_line_naming_its_module() -> None:
    ipvs = FakeIPVS(schedulers={"rr"})
    with pytest.raises(PreconditionError) as raised:
        check_schedulers(ipvs, ["rr", "wlc"])
    assert str(raised.value) == (
        "the kernel refuses IPVS scheduler 'wlc' (No such file or directory); load its module "
        "(modprobe ip_vs_wlc) or choose another with --ipvs-scheduler"
    )
    assert ipvs.dump() == {}


def test_a_virtual_server_on_the_probe_address_is_left_alone() -> None:
    ipvs = FakeIPVS()
    theirs = VirtualServer(probe_key(PROBE_PORTS[0]), "sh")
    ipvs.apply([AddVirtualServer(theirs)])
    check_schedulers(ipvs, ["wlc"])
    assert {key: state.server for key, state in ipvs.dump().items()} == {theirs.key: theirs}


def test_every_probe_port_taken_is_one_line() -> None:
    ipvs = FakeIPVS()
    ipvs.apply([AddVirtualServer(VirtualServer(probe_key(port), "rr")) for port in PROBE_PORTS])
    with pytest.raises(PreconditionError, match="cannot test IPVS scheduler 'wlc'") as raised:
        check_schedulers(ipvs, ["wlc"])
    assert "\n" not in str(raised.value)
    assert len(ipvs.dump()) == len(PROBE_PORTS)


ROOT_CAPS = "000001ffffffffff"
# Everything root has but CAP_NET_ADMIN (bit 12): root in a container without NET_ADMIN.
ROOT_WITHOUT_NET_ADMIN = f"{0x1FFFFFFFFFF & ~(1 << 12):016x}"
ONLY_NET_ADMIN = f"{1 << 12:016x}"


def proc_with(tmp_path: Path, caps: str) -> Path:
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "status").write_text(
        f"Name:\tipvsproxy\nCapInh:\t0000000000000000\nCapPrm:\t{caps}\nCapEff:\t{caps}\n"
    )
    return tmp_path


@pytest.mark.parametrize("caps", [ROOT_CAPS, ONLY_NET_ADMIN])
def test_net_admin_is_enough(tmp_path: Path, caps: str) -> None:
    require_net_admin(proc_with(tmp_path, caps))


@pytest.mark.parametrize("caps", ["0000000000000000", ROOT_WITHOUT_NET_ADMIN])
def test_without_net_admin_is_one_line(tmp_path: Path, caps: str) -> None:
    with pytest.raises(PreconditionError, match="needs CAP_NET_ADMIN") as raised:
        require_net_admin(proc_with(tmp_path, caps))
    assert "\n" not in str(raised.value)


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
