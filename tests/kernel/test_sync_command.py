"""`ipvsproxy sync --once`, `takeover --check` and `cleanup` on the real kernel, with real
traffic between pods.

The cluster is examples/cluster.yaml, with node-a's address moved onto the lab node and each
endpoint recreated as a pod at its manifest address, answering with its name.
"""

from __future__ import annotations

import ipaddress
import json
import re
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from copy import deepcopy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from ipvsproxy.cli import main
from tests.lab.netns import POD_GATEWAY_IPV4, Client, Node, Pod, ask, sh

EXAMPLE = Path("examples/cluster.yaml")
EXAMPLE_NODE_IP = "192.168.10.11"
# name -> (address in the example's EndpointSlices, ports it serves)
PODS = {
    "dns-a": ("10.244.0.5", (53, 9153)),
    "dns-b": ("10.244.1.7", (53, 9153)),
    "web-a": ("10.244.0.20", (8080,)),
    "web-b": ("10.244.1.21", (8080,)),
    "web-c": ("10.244.1.22", (8080,)),  # serving but terminating: must get no traffic
    "gw-a": ("10.244.0.30", (8443,)),
    "gw-c": ("10.244.2.31", (8443,)),
}
DNS_IP = "10.96.0.10"
DRAIN_DNS_IP = "10.96.0.53"


@dataclass(frozen=True)
class Ran:
    status: int
    stdout: str
    stderr: str


def ipvsproxy(*args: str) -> Ran:
    """The command in the test's own process: what these tests check is its effect on the
    kernel, and a new Python process inside the lab costs seconds."""
    result = CliRunner().invoke(main, list(args))
    return Ran(result.exit_code, result.stdout, result.stderr)


def ipvsproxy_process(*args: str) -> Ran:
    """The command as a node runs it, in a process of its own."""
    done = subprocess.run(
        [sys.executable, "-m", "ipvsproxy", *args], capture_output=True, text=True, check=False
    )
    return Ran(done.returncode, done.stdout, done.stderr)


def example_objects() -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = yaml.safe_load(EXAMPLE.read_text())["items"]
    return objects


def write_cluster(
    path: Path, objects: list[dict[str, Any]], node_ip: str, dns_ip: str = DNS_IP
) -> Path:
    text = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects})
    path.write_text(text.replace(EXAMPLE_NODE_IP, node_ip).replace(DNS_IP, dns_ip))
    return path


def without_endpoint(objects: list[dict[str, Any]], address: str) -> list[dict[str, Any]]:
    changed = deepcopy(objects)
    for obj in changed:
        if obj["kind"] == "EndpointSlice":
            obj["endpoints"] = [ep for ep in obj["endpoints"] if address not in ep["addresses"]]
    return changed


def sync(source: Path, *extra: str, run: Callable[..., Ran] = ipvsproxy) -> Ran:
    done = run("sync", "--once", "--source", str(source), "--hostname-override", "node-a", *extra)
    assert done.status == 0, done.stdout + done.stderr
    return done


def ipvs_table() -> set[str]:
    return set(sh("ipvsadm", "-Sn").splitlines())


def weights(virtual: str) -> dict[str, int]:
    """real server -> weight on one TCP virtual server, from `ipvsadm -Sn`."""
    found = {}
    for line in ipvs_table():
        words = line.split()
        if words[:3] == ["-a", "-t", virtual]:
            found[words[words.index("-r") + 1]] = int(words[words.index("-w") + 1])
    return found


def close_with_reset(sock: socket.socket) -> None:
    # An RST leaves the IPVS connection in CLOSE (10 s) rather than TIME_WAIT (120 s).
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


@pytest.fixture
def cluster(node: Node, tmp_path: Path) -> Iterator[Path]:
    """The example's pods, serving; yields its manifests with node-a's address on the lab node."""
    for name, (address, ports) in PODS.items():
        pod = node.add_pod(name, ipaddress.IPv4Address(address))
        for port in ports:
            pod.serve(port)
    yield write_cluster(tmp_path / "cluster.yaml", example_objects(), str(node.ipv4))
    ipvsproxy("cleanup")


@pytest.fixture
def caller(node: Node, cluster: Path, client: Callable[[Pod | None], Client]) -> Client:
    """A client in a pod of its own, made after the example's pods."""
    return client(node.add_pod("caller"))


def node_addresses(node: Node) -> tuple[str, ...]:
    """The node's own IPv4 addresses, where its NodePorts serve, as kube-proxy's: its
    interface's and the pods' gateway the lab gives each pod's link."""
    return (str(node.ipv4), POD_GATEWAY_IPV4)


def expected_table(node: Node) -> set[str]:
    def virtual(flag: str, address: str, extra: str = "") -> str:
        return f"-A {flag} {address} -s rr{extra}"

    def real(flag: str, address: str, server: str) -> str:
        return f"-a {flag} {address} -r {server} -m -w 1"

    table = {
        virtual("-t", "10.96.0.10:53"),
        virtual("-u", "10.96.0.10:53"),
        virtual("-t", "10.96.0.10:9153"),
        virtual("-t", "10.96.12.5:80", " -p 3600"),
        virtual("-t", "10.96.40.1:443"),
        virtual("-t", "203.0.113.10:443"),
    }
    addresses = node_addresses(node)
    for node_ip in addresses:
        table |= {virtual("-t", f"{node_ip}:30080", " -p 3600"), virtual("-t", f"{node_ip}:31443")}
    for flag, port in (("-t", 53), ("-u", 53), ("-t", 9153)):
        table |= {
            real(flag, f"10.96.0.10:{port}", f"{ip}:{port}") for ip in ("10.244.0.5", "10.244.1.7")
        }
    for vip in ("10.96.12.5:80", *(f"{node_ip}:30080" for node_ip in addresses)):
        table |= {real("-t", vip, f"{ip}:8080") for ip in ("10.244.0.20", "10.244.1.21")}
    table |= {real("-t", "10.96.40.1:443", f"{ip}:8443") for ip in ("10.244.0.30", "10.244.2.31")}
    # externalTrafficPolicy: Local: node-a's own endpoint only.
    local_vips = ("203.0.113.10:443", *(f"{node_ip}:31443" for node_ip in addresses))
    table |= {real("-t", vip, "10.244.0.30:8443") for vip in local_vips}
    return table


def test_example_cluster_is_programmed_exactly_and_serves_each_port(
    node: Node, cluster: Path, caller: Client
) -> None:
    sync(cluster, run=ipvsproxy_process)

    assert ipvs_table() == expected_table(node)
    assert set(caller.tcp_names(DNS_IP, 53, 20)) == {"dns-a", "dns-b"}
    assert set(caller.udp_names(DNS_IP, 53, 20)) == {"dns-a", "dns-b"}
    assert set(caller.tcp_names(DNS_IP, 9153, 20)) == {"dns-a", "dns-b"}
    # ClientIP affinity: one caller sticks to one of the ready web pods.
    for address, port in (("10.96.12.5", 80), (str(node.ipv4), 30080)):
        answers = caller.tcp_names(address, port, 10)
        assert len(answers) == 1
        assert set(answers) <= {"web-a", "web-b"}
    assert set(caller.tcp_names("10.96.40.1", 443, 20)) == {"gw-a", "gw-c"}
    assert set(caller.tcp_names(str(node.ipv4), 31443, 10)) == {"gw-a"}

    assert ipvsproxy_process("cleanup").status == 0
    assert not ipvs_table() & expected_table(node)


def test_the_node_itself_reaches_cluster_ips_and_node_ports(
    node: Node, cluster: Path, client: Callable[[Pod | None], Client]
) -> None:
    # From the node the source address is the service IP itself (it is local, on kube-ipvs0):
    # the KUBE-CLUSTER-IP src,dst rule marks it and KUBE-POSTROUTING masquerades it.
    on_node = client(None)

    sync(cluster)

    assert set(on_node.tcp_names(DNS_IP, 53, 20)) == {"dns-a", "dns-b"}
    assert set(on_node.udp_names(DNS_IP, 53, 20)) == {"dns-a", "dns-b"}
    assert set(on_node.tcp_names(str(node.ipv4), 31443, 5)) == {"gw-a"}


def test_a_second_sync_writes_nothing_and_keeps_an_open_connection(
    cluster: Path, caller: Client
) -> None:
    sync(cluster)
    with caller.connect(DNS_IP, 53) as connection:
        first = ask(connection)

        again = sync(cluster, "--output", "json")

        result = json.loads(again.stdout)
        # The iptables restores are always planned; they write only when the kernel differs.
        assert result["plan"]["counts"] == {"RestoreIptables": 2}
        assert result["writes"] == 0
        assert ask(connection) == first


def test_removed_endpoint_drains_then_goes(node: Node, caller: Client, tmp_path: Path) -> None:
    # A service address of its own: IPVS hands a real server re-added to a virtual server it
    # had recently the connections (TIME_WAIT included) that earlier tests left on it.
    vip = DRAIN_DNS_IP
    objects = example_objects()
    sync(write_cluster(tmp_path / "full.yaml", objects, str(node.ipv4), vip))
    connection = caller.connect(vip, 53)
    leaving = ask(connection)
    staying = "dns-b" if leaving == "dns-a" else "dns-a"
    address = PODS[leaving][0]
    shrunk = write_cluster(
        tmp_path / "shrunk.yaml", without_endpoint(objects, address), str(node.ipv4), vip
    )

    sync(shrunk)

    assert weights(f"{vip}:53")[f"{address}:53"] == 0
    # UDP has no connection to wait for: its real server goes at once.
    assert f"-a -u {vip}:53 -r {address}:53 -m -w 1" not in ipvs_table()
    assert ask(connection) == leaving
    assert caller.tcp_names(vip, 53, 10) == {staying: 10}

    close_with_reset(connection)
    deadline = time.monotonic() + 60
    while f"{address}:53" in weights(f"{vip}:53") and time.monotonic() < deadline:
        time.sleep(2)
        sync(shrunk)
    assert weights(f"{vip}:53") == {f"{PODS[staying][0]}:53": 1}


def test_flushed_table_is_restored(node: Node, cluster: Path, caller: Client) -> None:
    sync(cluster)

    sh("ipvsadm", "-C")
    sync(cluster)

    assert ipvs_table() == expected_table(node)
    assert set(caller.tcp_names(DNS_IP, 53, 10)) == {"dns-a", "dns-b"}


def test_takeover_check_passes_a_node_programmed_alike_and_names_a_busy_server_it_would_delete(
    node: Node, cluster: Path, caller: Client, tmp_path: Path
) -> None:
    takeover = ("takeover", "--check", "--hostname-override", "node-a", "--source")
    sync(cluster)

    alike = ipvsproxy(*takeover, str(cluster))
    with caller.connect(DNS_IP, 53) as connection:
        ask(connection)
        objects = [o for o in example_objects() if o["metadata"]["name"] != "kube-dns"]
        shrunk = write_cluster(tmp_path / "no-dns.yaml", objects, str(node.ipv4))
        busy = ipvsproxy(*takeover, str(shrunk))

    assert alike.status == 0, alike.stdout + alike.stderr
    assert "takeover: 10 virtual servers adopted, 10 of them as they are; 0 IPVS writes" in (
        alike.stdout
    )
    assert "takeover: safe" in alike.stdout
    assert busy.status == 1, busy.stdout + busy.stderr
    assert re.search(
        rf"takeover: would delete virtual server TCP {DNS_IP}:53, which has [1-9]\d* connections",
        busy.stdout,
    )
    assert "takeover: NOT safe" in busy.stdout
    assert f"-A -t {DNS_IP}:53 -s rr" in ipvs_table(), "a check changes nothing"
