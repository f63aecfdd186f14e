"""Write 1,000 virtual servers x 2 real servers three ways and print the wall time of each.

Run it inside a lab boot only, since it programs the kernel (for now through a one-line pytest
wrapper passed to ``python -m tests.lab``, which runs ``python bench/ipvs_batch.py``).
A figure, not a pass/fail check.
"""

from __future__ import annotations

import ipaddress
import subprocess
import time

from ipvsproxy.kernel.ipvs import NetlinkIPVS
from ipvsproxy.model import (
    AddRealServer,
    AddVirtualServer,
    DeleteVirtualServer,
    IPVSOp,
    RealServer,
    RealServerKey,
    TransportProtocol,
    VirtualServer,
    VirtualServerKey,
)

SERVICES = 1000


def _keys() -> list[VirtualServerKey]:
    return [
        VirtualServerKey(
            TransportProtocol.TCP, ipaddress.ip_address(f"10.98.{i // 250}.{i % 250 + 1}"), 80
        )
        for i in range(SERVICES)
    ]


def _ops() -> list[IPVSOp]:
    ops: list[IPVSOp] = []
    for key in _keys():
        ops.append(AddVirtualServer(VirtualServer(key)))
        for port in (8080, 8081):
            real = RealServer(RealServerKey(ipaddress.ip_address("10.244.0.5"), port))
            ops.append(AddRealServer(key, real))
    return ops


def _timed_netlink(batch_size: int) -> float:
    with NetlinkIPVS(batch_size=batch_size) as ipvs:
        start = time.perf_counter()
        results = ipvs.apply(_ops())
        elapsed = time.perf_counter() - start
        assert results.count(None) == len(results), "the table was not empty"
        ipvs.apply([DeleteVirtualServer(key) for key in _keys()])
    return elapsed


def _timed_ipvsadm_restore() -> float:
    lines = []
    for key in _keys():
        lines.append(f"-A -t {key.address}:80 -s rr")
        lines += [f"-a -t {key.address}:80 -r 10.244.0.5:{port} -m -w 1" for port in (8080, 8081)]
    script = "\n".join(lines) + "\n"
    start = time.perf_counter()
    subprocess.run(["ipvsadm", "-R"], input=script, text=True, check=True)
    elapsed = time.perf_counter() - start
    with NetlinkIPVS() as ipvs:
        ipvs.apply([DeleteVirtualServer(key) for key in _keys()])
    return elapsed


def main() -> None:
    ops = len(_ops())
    for name, seconds in (
        ("netlink, 256 requests per sendmsg", _timed_netlink(256)),
        ("netlink, one request per round trip", _timed_netlink(1)),
        ("ipvsadm -R", _timed_ipvsadm_restore()),
    ):
        print(f"{name:40} {ops} ops {seconds:7.3f} s {ops / seconds:9.0f} ops/s")


if __name__ == "__main__":
    main()
