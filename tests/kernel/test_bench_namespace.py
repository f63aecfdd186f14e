"""The scale benchmark runs each step in a network namespace of its own (bench.lab_scale).

IPVS keeps deleted real servers in a trash list per namespace, and each real server added
walks it: a step that ran where another had just emptied the kernel paid O(n^2) the first
step did not. A step's namespace starts empty, has working IPv4 real servers, and is gone
after the step, with what the step wrote.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

from bench.lab_scale import fresh_namespace
from ipvsproxy.kernel.ipvs import NetlinkIPVS
from ipvsproxy.model import (
    AddRealServer,
    AddVirtualServer,
    DeleteVirtualServer,
    RealServer,
    RealServerKey,
    TransportProtocol,
    VirtualServer,
    VirtualServerKey,
)

NAMESPACE = "ipvsp-test-bench"
NODES_SERVER = VirtualServer(
    VirtualServerKey(TransportProtocol.TCP, ipaddress.ip_address("10.96.7.1"), 80)
)
STEPS_SERVER = VirtualServer(
    VirtualServerKey(TransportProtocol.TCP, ipaddress.ip_address("10.96.7.2"), 80)
)
REAL = RealServer(RealServerKey(ipaddress.ip_address("10.244.7.1"), 8080))


def test_a_step_starts_from_an_empty_kernel_and_leaves_nothing() -> None:
    with NetlinkIPVS() as node:
        assert node.apply([AddVirtualServer(NODES_SERVER)]) == [None]
        try:
            with fresh_namespace(NAMESPACE), NetlinkIPVS() as step:
                assert step.dump() == {}
                added = step.apply(
                    [AddVirtualServer(STEPS_SERVER), AddRealServer(STEPS_SERVER.key, REAL)]
                )
                assert added == [None, None]
                assert Path(f"/run/netns/{NAMESPACE}").exists()
            assert not Path(f"/run/netns/{NAMESPACE}").exists()
            assert set(node.dump()) >= {NODES_SERVER.key}
            assert STEPS_SERVER.key not in node.dump()
        finally:
            node.apply([DeleteVirtualServer(NODES_SERVER.key)])
