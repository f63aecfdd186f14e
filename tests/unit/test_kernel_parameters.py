"""kube-proxy's IPVS sysctls and timeouts: which ones, planned only where they differ."""

from __future__ import annotations

from pathlib import Path

import pytest

from ipvsproxy.kernel.ipvs import KERNEL_DEFAULT_TIMEOUTS
from ipvsproxy.kernel.protocols import CONNTRACK_HASHSIZE
from ipvsproxy.kernel.sysctl import ProcSysctl
from ipvsproxy.kernel.testing import FakeKernel
from ipvsproxy.model import IPVSTimeouts, SetIPVSTimeouts, SetSysctl
from ipvsproxy.plan_json import operation_json
from ipvsproxy.reconcile.initialize import initialize
from ipvsproxy.reconcile.parameters import (
    CONNTRACK_MAX,
    READ,
    ConntrackSettings,
    parse_kernel_release,
    plan_sysctls,
    plan_timeouts,
    wanted_sysctls,
)
from ipvsproxy.reconcile.reconciler import Reconciler, ReconcilerSettings
from ipvsproxy.reconcile.state import KernelState
from ipvsproxy.reconcile.syncplan import plan_sync
from tests.unit.reconcile_kit import POD_A, TCP_VS, desired

NAMES = READ[1:]


def _current(release: str | None, **values: str) -> dict[str, str | None]:
    return {"kernel.osrelease": release, **dict.fromkeys(NAMES, "0"), **values}


@pytest.mark.parametrize(
    ("release", "version"),
    [
        ("6.1.0-18-amd64", (6, 1, 0)),
        ("6.1.176", (6, 1, 176)),
        ("5.4.0-150-generic", (5, 4, 0)),
        ("4.19.112+", (4, 19, 112)),
        ("3.10.0-1160.el7.x86_64", (3, 10, 0)),
        ("v5.10", (5, 10)),
        ("5.15.90.1-microsoft-standard-WSL2\n", (5, 15, 90, 1)),
    ],
)
def test_parse_kernel_release(release: str, version: tuple[int, ...]) -> None:
    assert parse_kernel_release(release) == version


@pytest.mark.parametrize("release", ["", "linux", "6", "6-rc1", "x6.1"])
def test_unparseable_kernel_release(release: str) -> None:
    assert parse_kernel_release(release) is None


@pytest.mark.parametrize(
    ("version", "conn_reuse_mode"),
    [
        ((3, 10, 0), None),
        ((4, 0, 9), None),
        ((4, 1), "0"),
        ((4, 19, 112), "0"),
        ((5, 8, 18), "0"),
        ((5, 9), None),
        ((5, 9, 0), None),
        ((6, 1, 0), None),
    ],
)
def test_conn_reuse_mode_follows_the_kernel_as_kube_proxy_does(
    version: tuple[int, ...], conn_reuse_mode: str | None
) -> None:
    wanted = dict(wanted_sysctls(version, strict_arp=False))
    assert wanted.get("net.ipv4.vs.conn_reuse_mode") == conn_reuse_mode


def test_only_what_differs_is_planned_in_kube_proxys_order() -> None:
    current = _current(
        "5.4.0-150-generic", **{"net.ipv4.ip_forward": "1", "net.ipv4.vs.conn_reuse_mode": "1"}
    )
    assert plan_sysctls(current, strict_arp=False) == (
        SetSysctl("net.ipv4.vs.conntrack", "1", "0"),
        SetSysctl("net.ipv4.vs.conn_reuse_mode", "0", "1"),
        SetSysctl("net.ipv4.vs.expire_nodest_conn", "1", "0"),
        SetSysctl("net.ipv4.vs.expire_quiescent_template", "1", "0"),
    )


@pytest.mark.parametrize("release", ["6.1.0-18-amd64", None, "linux"])
def test_conn_reuse_mode_is_left_as_found_on_a_fixed_or_unknown_kernel(
    release: str | None,
) -> None:
    current = _current(release, **{"net.ipv4.vs.conn_reuse_mode": "1"})
    planned = {op.name for op in plan_sysctls(current, strict_arp=False)}
    assert "net.ipv4.vs.conn_reuse_mode" not in planned


def test_strict_arp_only_when_asked() -> None:
    assert plan_sysctls(_current("6.1.0"), strict_arp=True)[-2:] == (
        SetSysctl("net.ipv4.conf.all.arp_ignore", "1", "0"),
        SetSysctl("net.ipv4.conf.all.arp_announce", "2", "0"),
    )
    assert not any("arp" in op.name for op in plan_sysctls(_current("6.1.0"), strict_arp=False))


def test_an_absent_parameter_is_planned_with_no_current_value() -> None:
    current = _current("6.1.0")
    del current["net.ipv4.vs.expire_nodest_conn"]
    assert SetSysctl("net.ipv4.vs.expire_nodest_conn", "1", None) in plan_sysctls(
        current, strict_arp=False
    )


@pytest.mark.parametrize(
    ("wanted", "planned"),
    [
        (IPVSTimeouts(), False),
        (IPVSTimeouts(tcp=900), False),
        (IPVSTimeouts(tcp=900, udp=300), False),
        (IPVSTimeouts(tcp=3600), True),
        (IPVSTimeouts(tcp_fin=30), True),
        (IPVSTimeouts(udp=1), True),
    ],
)
def test_timeouts_are_set_only_when_configured_and_different(
    wanted: IPVSTimeouts, planned: bool
) -> None:
    expected = (SetIPVSTimeouts(wanted),) if planned else ()
    assert plan_timeouts(wanted, KERNEL_DEFAULT_TIMEOUTS) == expected


def test_a_sync_sets_parameters_counts_them_and_repairs_them_as_drift() -> None:
    fake = FakeKernel()
    settings = ReconcilerSettings(strict_arp=True, ipvs_timeouts=IPVSTimeouts(tcp=3600, udp=60))
    reconciler = Reconciler(fake.kernel(), settings)
    first = reconciler.sync(desired({TCP_VS: [POD_A]}))
    assert first.ok
    assert first.plan.counts()["SetSysctl"] == 6
    assert first.plan.counts()["SetIPVSTimeouts"] == 1
    assert fake.sysctl.values["net.ipv4.conf.all.arp_announce"] == "2"
    assert fake.ipvs.timeouts() == IPVSTimeouts(tcp=3600, tcp_fin=120, udp=60)
    second = reconciler.sync(desired({TCP_VS: [POD_A]}))
    assert "SetSysctl" not in second.plan.counts()
    assert "SetIPVSTimeouts" not in second.plan.counts()
    fake.sysctl.values["net.ipv4.vs.conntrack"] = "0"
    fake.ipvs.set_timeouts(IPVSTimeouts(tcp=900))
    repaired = reconciler.sync(desired({TCP_VS: [POD_A]}))
    assert dict(repaired.drift) == {"sysctl": 1, "ipvs_timeouts": 1}


def test_a_refused_parameter_is_one_failure_and_the_rest_applies() -> None:
    fake = FakeKernel()
    del fake.sysctl.values["net.ipv4.vs.expire_nodest_conn"]
    result = Reconciler(fake.kernel()).sync(desired({TCP_VS: [POD_A]}))
    assert [str(failure) for failure in result.failures] == [
        "set sysctl net.ipv4.vs.expire_nodest_conn (absent) -> 1: No such file or directory"
    ]
    assert fake.sysctl.values["net.ipv4.vs.expire_quiescent_template"] == "1"
    assert fake.ipvs.dump()


def test_parameter_ops_carry_their_fields_in_json() -> None:
    state = desired({})
    timeouts = operation_json(SetIPVSTimeouts(IPVSTimeouts(tcp=3600)), state)
    assert timeouts == {
        "op": "SetIPVSTimeouts",
        "text": "set IPVS timeouts tcp 3600s",
        "tcp": 3600,
        "tcp_fin": 0,
        "udp": 0,
    }
    sysctl = operation_json(SetSysctl("net.ipv4.ip_forward", "1", "0"), state)
    assert sysctl == {
        "op": "SetSysctl",
        "text": "set sysctl net.ipv4.ip_forward 0 -> 1",
        "sysctl": "net.ipv4.ip_forward",
        "value": "1",
        "current": "0",
    }


def test_parameters_not_read_are_not_planned() -> None:
    """An incremental sync plans against a believed state without them: it sets none."""
    timeouts = IPVSTimeouts(tcp=3600)
    assert plan_sysctls(None, strict_arp=True) == ()
    assert plan_timeouts(timeouts, None) == ()
    state = desired({TCP_VS: [POD_A]})
    counts = plan_sync(state, KernelState(), strict_arp=True, timeouts=timeouts).counts()
    assert "SetSysctl" not in counts
    assert "SetIPVSTimeouts" not in counts


CONNTRACK = ConntrackSettings(
    max=262144, tcp_established=86400, tcp_close_wait=3600, tcp_be_liberal=True, udp=30
)
# A 6.1 kernel's own conntrack values on a small machine.
KERNEL_CONNTRACK = {
    CONNTRACK_MAX: "65536",
    CONNTRACK_HASHSIZE: "16384",
    "net.netfilter.nf_conntrack_tcp_timeout_established": "432000",
    "net.netfilter.nf_conntrack_tcp_timeout_close_wait": "60",
    "net.netfilter.nf_conntrack_tcp_be_liberal": "0",
    "net.netfilter.nf_conntrack_udp_timeout": "30",
    "net.netfilter.nf_conntrack_udp_timeout_stream": "120",
}


def _conntrack_ops(**current: str) -> dict[str, str]:
    values = {**_current("6.1.0"), **KERNEL_CONNTRACK, **current}
    planned = plan_sysctls(values, strict_arp=False, conntrack=CONNTRACK)
    return {op.name: op.value for op in planned if "conntrack" in op.name and "vs." not in op.name}


def test_conntrack_is_set_as_kube_proxy_sets_it() -> None:
    assert _conntrack_ops() == {
        CONNTRACK_MAX: "262144",
        CONNTRACK_HASHSIZE: "65536",
        "net.netfilter.nf_conntrack_tcp_timeout_established": "86400",
        "net.netfilter.nf_conntrack_tcp_timeout_close_wait": "3600",
        "net.netfilter.nf_conntrack_tcp_be_liberal": "1",
    }
    values = {**_current("6.1.0"), **KERNEL_CONNTRACK}
    planned = plan_sysctls(values, strict_arp=False, conntrack=CONNTRACK)
    # kube-proxy sets conntrack's before its proxier's own.
    assert planned[0].name == CONNTRACK_MAX
    assert planned[-1].name.startswith("net.ipv4")


def test_conntrack_max_and_its_hash_table_are_only_ever_raised() -> None:
    planned = _conntrack_ops(**{CONNTRACK_MAX: "1048576", CONNTRACK_HASHSIZE: "262144"})
    assert CONNTRACK_MAX not in planned and CONNTRACK_HASHSIZE not in planned
    # The hash table follows the maximum asked for, even where the node's is already higher.
    assert _conntrack_ops(**{CONNTRACK_MAX: "300000"})[CONNTRACK_HASHSIZE] == "65536"


def test_conntrack_parameters_the_kernel_lacks_wait_for_nf_conntrack() -> None:
    values = {name: v for name, v in _current("6.1.0").items() if name not in KERNEL_CONNTRACK}
    assert not any(
        "netfilter" in op.name or "nf_conntrack" in op.name
        for op in plan_sysctls(values, strict_arp=False, conntrack=CONNTRACK)
    )


def test_nothing_of_conntrack_is_touched_unless_asked() -> None:
    values = {**_current("6.1.0"), **KERNEL_CONNTRACK}
    assert all(
        "vs." in op.name or "ip_forward" in op.name for op in plan_sysctls(values, strict_arp=False)
    )


def test_a_module_parameter_is_read_and_written_as_a_sysctl(tmp_path: Path) -> None:
    parameters = tmp_path / "module" / "nf_conntrack" / "parameters"
    parameters.mkdir(parents=True)
    (parameters / "hashsize").write_text("16384\n")
    sysctl = ProcSysctl(tmp_path / "sys", tmp_path / "module")
    assert sysctl.get(CONNTRACK_HASHSIZE) == "16384"
    sysctl.set(CONNTRACK_HASHSIZE, "65536")
    assert (parameters / "hashsize").read_text() == "65536\n"
    assert sysctl.get("module.nf_nat.parameters.nothing") is None


def test_init_only_sets_the_parameters_and_nothing_else() -> None:
    fake = FakeKernel()
    fake.sysctl.values.update(KERNEL_CONNTRACK)
    settings = ReconcilerSettings(
        strict_arp=True, ipvs_timeouts=IPVSTimeouts(tcp=900), conntrack=CONNTRACK
    )
    outcome = initialize(fake.kernel(), settings)
    assert not outcome.failures
    assert fake.sysctl.values[CONNTRACK_MAX] == "262144"
    assert fake.sysctl.values["net.ipv4.vs.conntrack"] == "1"
    assert fake.ipvs.timeouts().tcp == 900
    assert fake.ipvs.dump() == {}
    assert not fake.addresses.interface_exists("kube-ipvs0")
    # The proxy's first full sync then finds nothing of them to write.
    plan = Reconciler(fake.kernel(), settings).plan(desired({TCP_VS: [POD_A]}))
    assert plan.sysctls == () and plan.timeouts == ()
    assert initialize(fake.kernel(), settings).applied == ()
