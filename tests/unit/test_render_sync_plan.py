from __future__ import annotations

import json
from dataclasses import replace

from ipvsproxy.kernel.testing import FakeKernel
from ipvsproxy.model import AddRealServer, DeleteVirtualServer, IPVSTimeouts, VirtualServerKey
from ipvsproxy.reconcile.reconciler import Reconciler
from ipvsproxy.reconcile.state import EMPTY_KERNEL
from ipvsproxy.reconcile.syncplan import plan_sync
from ipvsproxy.render import sync_plan_json, sync_plan_text, sync_result_json, sync_result_text
from tests.unit.reconcile_kit import (
    POD_A,
    POD_B,
    POD_C,
    TCP_VS,
    UDP_VS,
    ManualClock,
    RefusingIPVS,
    desired,
    ip,
)

STALE = VirtualServerKey(TCP_VS.protocol, ip("10.96.0.20"), 80)


def test_an_empty_kernel_plan_reads_as_additions_with_counts() -> None:
    state = desired({UDP_VS: [POD_A]})

    plan = plan_sync(state, EMPTY_KERNEL, timeouts=IPVSTimeouts(tcp=3600, udp=60))
    text = sync_plan_text(plan, state)

    assert text.splitlines() == [
        "~ set sysctl net.ipv4.vs.conntrack (absent) -> 1",
        "~ set sysctl net.ipv4.vs.expire_nodest_conn (absent) -> 1",
        "~ set sysctl net.ipv4.vs.expire_quiescent_template (absent) -> 1",
        "~ set sysctl net.ipv4.ip_forward (absent) -> 1",
        "~ set IPVS timeouts tcp 3600s, udp 60s",
        "+ interface kube-ipvs0",
        "+ 1 addresses on kube-ipvs0: 10.96.0.10",
        "+ UDP 10.96.0.10:53 rr  (default/web:http, ClusterIP)",
        "    + 10.244.1.2:8080 masquerade weight 1",
        "9 operations: 1 AddRealServer, 1 AddVirtualServer, 1 BindAddress, 1 EnsureInterface, "
        "1 SetIPVSTimeouts, 4 SetSysctl",
    ]


def test_changes_drains_deletions_and_flushes_are_marked() -> None:
    fake, clock = FakeKernel(), ManualClock()
    proxy = Reconciler(fake.kernel(), clock=clock)
    proxy.sync(desired({TCP_VS: [POD_A, POD_B, POD_C], UDP_VS: [POD_A, POD_B], STALE: [POD_A]}))
    fake.ipvs.set_connections(TCP_VS, POD_B.key, active=2, inactive=1)
    fake.ipvs.set_connections(TCP_VS, POD_C.key, active=1)
    proxy.sync(desired({TCP_VS: [POD_A, POD_C], UDP_VS: [POD_A, POD_B], STALE: [POD_A]}))
    state = desired({TCP_VS: [POD_A], UDP_VS: [POD_A]})

    lines = sync_plan_text(proxy.plan(state), state).splitlines()

    assert lines == [
        "- 1 addresses from kube-ipvs0: 10.96.0.20",
        "  UDP 10.96.0.10:53 rr  (default/web:http, ClusterIP)",
        "    - 10.244.1.3:8080  conntrack entries flushed",
        "  TCP 10.96.0.10:80 rr  (default/web:http, ClusterIP)",
        "    ~ 10.244.1.4:8080 masquerade weight 0  draining (1 active, 0 inactive connections)",
        "    = 10.244.1.3:8080 weight 0  draining, waiting (2 active, 1 inactive connections)",
        "- TCP 10.96.0.20:80  (no longer desired)",
        "5 operations: 1 DeleteRealServer, 1 DeleteVirtualServer, 1 FlushConntrack, "
        "1 UnbindAddress, 1 UpdateRealServer; 2 draining",
    ]


def test_json_lists_every_operation_and_drain() -> None:
    state = desired({UDP_VS: [POD_A]})

    plan = json.loads("".join(sync_plan_json(plan_sync(state, EMPTY_KERNEL), state)))

    assert [op["text"] for op in plan["operations"]][4:] == [
        "create interface kube-ipvs0",
        "bind address 10.96.0.10",
        "add virtual server UDP 10.96.0.10:53 rr",
        "add real server 10.244.1.2:8080 to UDP 10.96.0.10:53",
    ]
    assert plan["counts"]["AddRealServer"] == 1
    assert plan["draining"] == []


def test_a_sync_result_lists_totals_drift_and_each_failure() -> None:
    fake = FakeKernel()
    state = desired({UDP_VS: [POD_A, POD_B]})
    proxy = Reconciler(fake.kernel(), clock=ManualClock())
    proxy.sync(state)
    fake.ipvs.apply([DeleteVirtualServer(UDP_VS)])
    refusing = RefusingIPVS(fake.ipvs, {AddRealServer(UDP_VS, POD_B)})
    proxy = Reconciler(replace(fake.kernel(), ipvs=refusing), clock=ManualClock())
    proxy.sync(state)  # adopts: a new instance counts no drift
    fake.ipvs.apply([DeleteVirtualServer(UDP_VS)])

    result = proxy.sync(state)

    assert sync_result_text(result).splitlines() == [
        "applied 2 operations (2 kernel writes), 1 failed, 0 held back, 0 draining",
        "drift repaired: 1 real_server, 1 virtual_server",
        "failed: add real server 10.244.1.3:8080 to UDP 10.96.0.10:53: File exists",
    ]
    as_json = json.loads("".join(sync_result_json(result, state)))
    assert as_json["failures"] == [
        {
            "text": "add real server 10.244.1.3:8080 to UDP 10.96.0.10:53: File exists",
            "errno": 17,
            "reason": "File exists",
        }
    ]
    assert as_json["drift"] == {"real_server": 1, "virtual_server": 1}
