"""``takeover --check``'s verdict: which planned writes would interrupt traffic."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from click.testing import CliRunner

from ipvsproxy.cli import main
from ipvsproxy.model import (
    AddVirtualServer,
    DeleteVirtualServer,
    IPVSTable,
    RealServer,
    RealServerState,
    VirtualServer,
    VirtualServerKey,
    VirtualServerState,
)
from ipvsproxy.reconcile.ipvs_plan import IPVSPlan
from ipvsproxy.reconcile.state import KernelState
from ipvsproxy.reconcile.syncplan import plan_sync
from ipvsproxy.reconcile.takeover import check_takeover
from ipvsproxy.render import takeover_text
from tests.unit.reconcile_kit import POD_A, POD_B, STALE_VS, TCP_VS, UDP_VS, desired


def table(**connections: tuple[VirtualServerKey, RealServer, int, int, int]) -> IPVSTable:
    """Virtual servers, each with one real server and its (active, inactive, persistent)."""
    states = {}
    for key, real, active, inactive, persistent in connections.values():
        state = RealServerState(real, active, inactive, persistent)
        states[key] = VirtualServerState(VirtualServer(key), MappingProxyType({real.key: state}))
    return MappingProxyType(states)


def actual_of(ipvs: IPVSTable) -> KernelState:
    return KernelState(ipvs=ipvs, bound_addresses=frozenset(key.address for key in ipvs))


def test_a_node_that_needs_nothing_is_adopted_untouched_and_safe() -> None:
    ipvs = table(web=(TCP_VS, POD_A, 3, 1, 0), dns=(UDP_VS, POD_A, 0, 7, 0))
    plan = plan_sync(desired({TCP_VS: [POD_A], UDP_VS: [POD_A]}), actual_of(ipvs))

    check = check_takeover(plan, ipvs)

    assert (check.adopted, check.untouched, check.ipvs_writes) == (2, 2, 0)
    assert check.safe and check.interruptions == ()


def test_deleting_a_virtual_server_with_connections_or_affinity_is_not_safe() -> None:
    ipvs = table(
        web=(TCP_VS, POD_A, 0, 0, 0),
        busy=(STALE_VS, POD_A, 0, 0, 2),  # only persistence templates: affinity would go
        idle=(UDP_VS, POD_B, 0, 0, 0),
    )
    plan = plan_sync(desired({TCP_VS: [POD_A, POD_B]}), actual_of(ipvs))

    check = check_takeover(plan, ipvs)

    assert not check.safe
    assert [str(i) for i in check.interruptions] == [
        f"would delete virtual server {STALE_VS}, which has 2 connections"
    ]
    assert (check.adopted, check.untouched, check.ipvs_writes) == (1, 0, 3)
    assert "takeover: NOT safe: 1 virtual servers carrying traffic" in takeover_text(check)


def test_a_busy_virtual_server_deleted_and_added_again_is_a_re_creation() -> None:
    ipvs = table(web=(TCP_VS, POD_A, 1, 0, 0))
    plan = plan_sync(desired({TCP_VS: [POD_A]}), actual_of(ipvs))
    recreating = replace(
        plan,
        ipvs=IPVSPlan(
            changes=(AddVirtualServer(VirtualServer(TCP_VS)),),
            stale=(DeleteVirtualServer(TCP_VS),),
        ),
    )

    (interruption,) = check_takeover(recreating, ipvs).interruptions

    assert str(interruption) == f"would re-create virtual server {TCP_VS}, which has 1 connections"


def test_takeover_without_check_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["takeover"])

    assert result.exit_code == 2
    assert "takeover needs --check" in result.stderr
