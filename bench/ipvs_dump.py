"""Read back 5,000 virtual servers x 2 real servers, and delete conntrack flows, timed.

Run it inside a lab boot only, since it programs the kernel, from the repository root (it
seeds flows with the lab's conntrack helper):
``python -m tests.lab --run env PYTHONPATH=. python bench/ipvs_dump.py [--services N
--real-servers M --runs R]``. A figure, not a pass/fail check: wall and CPU seconds of
``NetlinkIPVS.dump()`` beside ``ipvsadm -Sn`` in the same boot; of the periodic full sync's
interleaved read (``read_ipvs_between``: the table listed, then each virtual server's real
servers) beside the same listing followed by ``virtual_server()`` of each, the read it had
before, taking turns ``--runs`` times; and of deleting the conntrack flows of many endpoints
in one call.
"""

from __future__ import annotations

import argparse
import ipaddress
import subprocess
import time
from collections.abc import Callable

from ipvsproxy.kernel.conntrack import Flow
from ipvsproxy.kernel.ipvs import NetlinkIPVS
from ipvsproxy.model import (
    AddRealServer,
    AddVirtualServer,
    DeleteVirtualServer,
    IPVSOp,
    IPVSTable,
    RealServer,
    RealServerKey,
    TransportProtocol,
    VirtualServer,
    VirtualServerKey,
)
from ipvsproxy.reconcile.state import read_ipvs_between
from tests.lab.conntrack import SeededConntrack

SERVICES = 5000
REAL_SERVERS = 2
FLUSHED_ENDPOINTS = 500
FLOWS_PER_ENDPOINT = 4


def _key(index: int, protocol: TransportProtocol = TransportProtocol.TCP) -> VirtualServerKey:
    address = ipaddress.ip_address(f"10.97.{index // 250}.{index % 250 + 1}")
    return VirtualServerKey(protocol, address, 80)


def _endpoint(index: int) -> RealServerKey:
    return RealServerKey(ipaddress.ip_address(f"10.244.{index // 250}.{index % 250 + 1}"), 8080)


def _table_ops(services: int, real_servers: int) -> list[IPVSOp]:
    ops: list[IPVSOp] = []
    for index in range(services):
        key = _key(index)
        ops.append(AddVirtualServer(VirtualServer(key)))
        for port in range(8080, 8080 + real_servers):
            real = RealServer(RealServerKey(ipaddress.ip_address("10.244.0.5"), port))
            ops.append(AddRealServer(key, real))
    return ops


def _timed(action: Callable[[], object]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    action()
    return time.perf_counter() - wall, time.process_time() - cpu


def _report(name: str, seconds: tuple[float, float]) -> None:
    print(f"{name:52} wall {seconds[0]:7.3f} s  cpu {seconds[1]:7.3f} s")


def _each_read_again(ipvs: NetlinkIPVS) -> IPVSTable:
    """The listing, then every virtual server read again with its real servers."""
    return {
        key: state
        for key in ipvs.dump(real_servers=False)
        if (state := ipvs.virtual_server(key)) is not None
    }


def _dump_figures(services: int, real_servers: int, runs: int) -> None:
    size = f"{services} x {real_servers}"
    with NetlinkIPVS() as ipvs:
        results = ipvs.apply(_table_ops(services, real_servers))
        assert results.count(None) == len(results), "the table was not empty"
        try:
            table: dict[str, int] = {}
            timed = _timed(lambda: table.update(count=len(ipvs.dump())))
            assert table["count"] == services, table
            _report(f"NetlinkIPVS.dump(), {size}", timed)
            command = ["ipvsadm", "-Sn"]
            _report(
                "ipvsadm -Sn, same table",
                _timed(lambda: subprocess.run(command, check=True, capture_output=True)),
            )
            for run in range(1, runs + 1):
                _report(
                    f"read_ipvs_between, {size}, run {run}",
                    _timed(lambda: read_ipvs_between(ipvs, tuple)),
                )
                _report(
                    f"listing + virtual_server() each, {size}, run {run}",
                    _timed(lambda: _each_read_again(ipvs)),
                )
        finally:
            ipvs.apply([DeleteVirtualServer(_key(index)) for index in range(services)])


def _flows() -> list[Flow]:
    return [
        Flow(
            service=_key(index, TransportProtocol.UDP),
            endpoint=_endpoint(index),
            client=ipaddress.ip_address("10.244.200.1"),
            client_port=10000 + flow,
        )
        for index in range(FLUSHED_ENDPOINTS)
        for flow in range(FLOWS_PER_ENDPOINT)
    ]


def _conntrack_figures() -> None:
    flows = _flows()
    targets = [
        (_key(index, TransportProtocol.UDP), _endpoint(index)) for index in range(FLUSHED_ENDPOINTS)
    ]
    with SeededConntrack() as conntrack:
        for flow in flows:
            conntrack.add_flow(flow)
        timed = _timed(lambda: conntrack.delete_entries(targets))
        assert not conntrack.flows(), "flows were left"
    _report(f"conntrack: {len(flows)} flows of {len(targets)} endpoints deleted", timed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--services", type=int, default=SERVICES)
    parser.add_argument("--real-servers", type=int, default=REAL_SERVERS)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    _dump_figures(args.services, args.real_servers, args.runs)
    _conntrack_figures()


if __name__ == "__main__":
    main()
