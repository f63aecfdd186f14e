"""The reconciler over the real kernel: minimal writes, ownership, drift repair, graceful drains."""

from __future__ import annotations

import ipaddress
import socket
import struct
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ipvsproxy.cluster.parse import snapshot_from_objects
from ipvsproxy.kernel.bundle import real_kernel
from ipvsproxy.kernel.protocols import Kernel
from ipvsproxy.model import (
    DUMMY_INTERFACE,
    DeleteRealServer,
    DeleteVirtualServer,
    DesiredState,
    FlushConntrack,
    IPFamily,
    RealServerKey,
    TransportProtocol,
    VirtualServerKey,
)
from ipvsproxy.reconcile.reconciler import Reconciler, ReconcilerSettings
from ipvsproxy.translate import Settings, translate
from tests.lab.netns import NODE_IPV4, Client, Pod, ask, inside, sh

VIP = "10.96.0.50"
# The drain test has a service address of its own: IPVS hands a re-added real server the
# connections (and counters) it had before, and earlier tests leave some in TIME_WAIT.
DRAIN_VIP = "10.96.0.51"
DRAIN_VS = VirtualServerKey(TransportProtocol.TCP, ipaddress.ip_address(DRAIN_VIP), 80)
UDP_VS = VirtualServerKey(TransportProtocol.UDP, ipaddress.ip_address(VIP), 53)
FOREIGN = "192.0.2.50"
# Drains are bounded by the kernel here, not by the grace period.
SETTINGS = ReconcilerSettings(grace_period=3600.0)


def cluster(*pods: Pod, vip: str = VIP) -> DesiredState:
    objects: list[dict[str, Any]] = [
        {
            "kind": "Node",
            "metadata": {"name": "node-a"},
            "status": {"addresses": [{"type": "InternalIP", "address": str(NODE_IPV4)}]},
        },
        {
            "kind": "Service",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {
                "clusterIP": vip,
                "clusterIPs": [vip],
                "ports": [
                    {"name": "http", "port": 80, "protocol": "TCP"},
                    {"name": "dns", "port": 53, "protocol": "UDP"},
                ],
            },
        },
        {
            "kind": "EndpointSlice",
            "metadata": {
                "name": "web-1",
                "namespace": "shop",
                "labels": {"kubernetes.io/service-name": "web"},
            },
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": [str(p.ipv4)], "nodeName": "node-a", "conditions": {"ready": True}}
                for p in pods
            ],
            "ports": [
                {"name": "http", "port": 8080, "protocol": "TCP"},
                {"name": "dns", "port": 8080, "protocol": "UDP"},
            ],
        },
    ]
    snapshot, _ = snapshot_from_objects(objects, "node-a")
    return translate(snapshot, Settings())


@pytest.fixture
def kernel() -> Iterator[Kernel]:
    """The real kernel; afterwards, everything a sync made here is removed again."""
    with real_kernel() as real:
        services_before = set(real.ipvs.dump())
        sets_before = set(real.ipsets.list_sets())
        chains_before = {family: real.iptables.our_chains(family) for family in IPFamily}
        try:
            yield real
        finally:
            made = set(real.ipvs.dump()) - services_before
            real.ipvs.apply([DeleteVirtualServer(key) for key in made])
            real.addresses.delete_interface(DUMMY_INTERFACE)
            for family in IPFamily:
                ours = real.iptables.our_chains(family)
                before = chains_before[family]
                new = {t: c - before.get(t, frozenset()) for t, c in ours.items()}
                real.iptables.remove(family, new)
            for name in set(real.ipsets.list_sets()) - sets_before:
                real.ipsets.destroy(name)


@pytest.fixture
def foreign_service() -> Iterator[str]:
    """A virtual server someone else made, on an address that is not ours."""
    sh("ipvsadm", "-A", "-t", f"{FOREIGN}:80", "-s", "wlc")
    sh("ipvsadm", "-a", "-t", f"{FOREIGN}:80", "-r", "10.244.9.9:80", "-m")
    yield f"{FOREIGN}:80"
    sh("ipvsadm", "-D", "-t", f"{FOREIGN}:80")


def test_a_second_sync_and_a_restart_write_nothing_and_a_foreign_service_survives(
    kernel: Kernel,
    pod: Callable[[str], Pod],
    client: Callable[[Pod | None], Client],
    foreign_service: str,
) -> None:
    web = [pod("web-a"), pod("web-b")]
    caller = client(pod("caller"))
    proxy = Reconciler(kernel, SETTINGS)

    first = proxy.sync(cluster(*web))
    second = proxy.sync(cluster(*web))
    after_restart = Reconciler(kernel, SETTINGS).sync(cluster(*web))

    assert first.ok, [str(f) for f in first.failures]
    assert first.writes > 0
    assert second.ok and second.writes == 0 and second.applied == ()
    assert after_restart.ok and after_restart.writes == 0
    assert set(caller.tcp_names(VIP, 80, 6)) == {"web-a", "web-b"}
    assert set(caller.udp_names(VIP, 53, 6)) == {"web-a", "web-b"}
    assert foreign_service in sh("ipvsadm", "-Ln")


def test_ipvsadm_clear_then_sync_restores_the_table_and_counts_the_drift(
    kernel: Kernel, pod: Callable[[str], Pod], client: Callable[[Pod | None], Client]
) -> None:
    web = [pod("web-a"), pod("web-b")]
    caller = client(pod("caller"))
    proxy = Reconciler(kernel, SETTINGS)
    proxy.sync(cluster(*web))
    table = {key: state.real_servers.keys() for key, state in kernel.ipvs.dump().items()}

    sh("ipvsadm", "-C")
    repaired = proxy.sync(cluster(*web))

    assert repaired.ok
    assert repaired.drift == {"virtual_server": 2, "real_server": 4}
    assert {k: s.real_servers.keys() for k, s in kernel.ipvs.dump().items()} == table
    assert set(caller.tcp_names(VIP, 80, 6)) == {"web-a", "web-b"}


def _reset(sock: socket.socket) -> None:
    """Close with a RST: IPVS then forgets the connection in seconds, not TIME_WAIT's minutes."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_an_open_connection_survives_its_endpoints_removal_until_it_closes(
    kernel: Kernel, pod: Callable[[str], Pod], client: Callable[[Pod | None], Client]
) -> None:
    web = {name: pod(name) for name in ("web-a", "web-b")}
    caller = client(pod("caller"))
    proxy = Reconciler(kernel, SETTINGS)
    proxy.sync(cluster(*web.values(), vip=DRAIN_VIP))

    held = caller.connect(DRAIN_VIP, 80)
    serving = ask(held)
    leaving, staying = web[serving], next(p for n, p in web.items() if n != serving)
    draining = proxy.sync(cluster(staying, vip=DRAIN_VIP))

    assert [d.ref.real.address for d in draining.draining] == [leaving.ipv4]
    assert draining.draining[0].active_connections == 1
    assert (
        kernel.ipvs.dump()[DRAIN_VS].real_servers[draining.draining[0].ref.real].server.weight == 0
    )
    assert ask(held) == leaving.name  # the established connection still reaches its pod
    assert set(caller.tcp_names(DRAIN_VIP, 80, 6)) == {staying.name}
    assert proxy.sync(cluster(staying, vip=DRAIN_VIP)).draining  # still open: still draining

    _reset(held)
    deleted = _sync_until_drained(proxy, cluster(staying, vip=DRAIN_VIP))

    assert deleted
    assert [key.address for key in kernel.ipvs.dump()[DRAIN_VS].real_servers] == [staying.ipv4]


def _sync_until_drained(proxy: Reconciler, state: DesiredState, attempts: int = 40) -> bool:
    """Sync until no drain is left; the kernel expires a reset connection within ~10 s."""
    for _ in range(attempts):
        if not proxy.sync(state).draining:
            return True
        time.sleep(1)
    return False


@pytest.fixture
def ipvs_sysctls(kernel: Kernel) -> Iterator[None]:
    """kube-proxy's IPVS sysctls, so a flow to a deleted real server is not held on to."""
    wanted = {"net.ipv4.vs.conntrack": "1", "net.ipv4.vs.expire_nodest_conn": "1"}
    before = {name: kernel.sysctl.get(name) for name in wanted}
    for name, value in wanted.items():
        kernel.sysctl.set(name, value)
    yield
    for name, old in before.items():
        kernel.sysctl.set(name, old or "0")


def _udp_name(sock: socket.socket, attempts: int = 3) -> str:
    """Ask from one fixed source port; the first datagram after a deletion may be dropped."""
    for _ in range(attempts):
        sock.sendto(b"who\n", (VIP, 53))
        try:
            return sock.recv(256).decode()
        except TimeoutError:
            continue
    raise TimeoutError(f"no answer from {VIP}:53 in {attempts} tries")


def test_a_udp_client_moves_to_another_pod_at_once_when_its_endpoint_goes(
    kernel: Kernel,
    ipvs_sysctls: None,
    pod: Callable[[str], Pod],
    client: Callable[[Pod | None], Client],
) -> None:
    web = {name: pod(name) for name in ("web-a", "web-b")}
    caller = pod("caller")
    proxy = Reconciler(kernel, SETTINGS)
    proxy.sync(cluster(*web.values()))
    with inside(caller.namespace):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with sock:
        sock.settimeout(2.0)
        serving = _udp_name(sock)
        staying = next(p for n, p in web.items() if n != serving)

        removed = proxy.sync(cluster(staying))

        leaving = RealServerKey(web[serving].ipv4, 8080)
        assert removed.ok
        assert all(drain.ref.virtual != UDP_VS for drain in removed.draining)
        assert DeleteRealServer(UDP_VS, leaving) in removed.applied
        assert FlushConntrack(UDP_VS, leaving) in removed.applied
        assert {_udp_name(sock) for _ in range(3)} == {staying.name}
