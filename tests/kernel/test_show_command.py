"""On the real kernel: `ipvsproxy show` reads the live table, with names from --source."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from ipvsproxy.cli import main
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

DNS = VirtualServerKey(TransportProtocol.UDP, ipaddress.ip_address("10.96.0.10"), 53)
LEAVING = RealServerKey(ipaddress.ip_address("10.244.9.9"), 53)
WANTED = RealServerKey(ipaddress.ip_address("10.244.0.5"), 53)


@pytest.fixture
def kernel_table() -> Iterator[None]:
    with NetlinkIPVS() as ipvs:
        results = ipvs.apply(
            [
                AddVirtualServer(VirtualServer(DNS)),
                AddRealServer(DNS, RealServer(WANTED)),
                AddRealServer(DNS, RealServer(LEAVING, weight=0)),
            ]
        )
        assert results == [None, None, None]
        try:
            yield
        finally:
            ipvs.apply([DeleteVirtualServer(DNS)])


@pytest.mark.usefixtures("kernel_table")
def test_show_names_the_live_table_and_marks_draining() -> None:
    args = ["show", "kube-system/kube-dns", "--output", "json"]
    args += ["--source", "examples/cluster.yaml", "--hostname-override", "node-a"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    (port,) = json.loads(result.output)
    assert (port["service"], port["portName"]) == ("kube-system/kube-dns", "dns")
    (virtual,) = port["virtualServers"]
    reals = {real["address"]: (real["weight"], real["draining"]) for real in virtual["realServers"]}
    assert reals == {"10.244.0.5": (1, False), "10.244.9.9": (0, True)}


@pytest.mark.usefixtures("kernel_table")
def test_show_without_names_reads_the_kernel_alone() -> None:
    result = CliRunner().invoke(main, ["show"])
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.output.splitlines()]
    assert ["-", "-", "UDP", "10.96.0.10:53", "rr", "10.244.0.5:53", "1"] in [r[:7] for r in rows]
