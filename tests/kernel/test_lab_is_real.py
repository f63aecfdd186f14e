"""The lab is a real kernel: IPVS forwards real packets between namespaces."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable
from typing import Any

import pytest
from pyroute2 import IPVS, IPVSDest, IPVSService

from tests.lab.netns import Client, Node, Pod, sh


def _service_stats(ipvs: IPVS, port: int) -> Any:
    (dumped,) = [
        message.get("IPVS_CMD_ATTR_SERVICE")
        for message in ipvs.service("dump")
        if message.get("IPVS_CMD_ATTR_SERVICE").get("IPVS_SVC_ATTR_PORT") == port
    ]
    return dumped.get("IPVS_SVC_ATTR_STATS")


SERVICE_IP = {4: "10.96.0.10", 6: "fd00:10:96::10"}
PREFIX = {4: 32, 6: 128}


@pytest.mark.parametrize("family", [4, 6])
def test_ipvs_masquerades_to_two_pods(
    family: int,
    node: Node,
    pod: Callable[[str], Pod],
    client: Callable[[Pod | None], Client],
) -> None:
    backends = [pod("web-a"), pod("web-b")]
    caller = pod("caller")
    vip = SERVICE_IP[family]
    sh("ip", "link", "add", "kube-ipvs0", "type", "dummy")
    sh(
        "ip",
        "addr",
        "add",
        f"{vip}/{PREFIX[family]}",
        "dev",
        "kube-ipvs0",
        *(["nodad"] if family == 6 else []),
    )
    ipvs = IPVS()
    # For IPv6 the kernel reads the netmask attribute as a prefix length in host byte order
    # (as ipvsadm sends it); pyroute2 encodes the attribute as an IPv4 address.
    netmask = {} if family == 4 else {"netmask": socket.inet_ntoa(struct.pack("=I", 128))}
    service = IPVSService(
        addr=vip, port=80, protocol=socket.IPPROTO_TCP, sched_name="rr", **netmask
    )
    ipvs.service("add", service=service)
    try:
        for backend in backends:
            address = str(backend.ipv4 if family == 4 else backend.ipv6)
            ipvs.dest(
                "add",
                service=service,
                dest=IPVSDest(addr=address, port=8080, fwd_method=0, weight=1),
            )

        answers = client(caller).tcp_names(vip, 80, count=100)

        assert answers == {"web-a": 50, "web-b": 50}
        # The kernel folds its per-CPU counters into the dumped ones on a 2 s timer.
        stats = _service_stats(ipvs, port=80)
        for _ in range(50):
            if stats.get("IPVS_STATS_ATTR_CONNS"):
                break
            time.sleep(0.1)
            stats = _service_stats(ipvs, port=80)
        assert stats.get("IPVS_STATS_ATTR_CONNS") > 0
        assert stats.get("IPVS_STATS_ATTR_INPKTS") > 0
    finally:
        ipvs.service("del", service=service)
        ipvs.close()
        sh("ip", "link", "del", "kube-ipvs0")
