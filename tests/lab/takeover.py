"""A node taken over from the real kube-proxy by ``ipvsproxy run`` and handed back, under
live load: README's Install procedure, one node, measured.

The lab's root namespace is node-a, with etcd and kube-apiserver on its address. kube-proxy
(``--proxy-mode=ipvs``, its own KubeProxyConfiguration) programs ``services`` Services; pods
serve a few of them to clients in the pod network and outside it while the rest only fill the
table. With the load running: ``ipvsproxy takeover --check`` (the operator's step), kube-proxy
stopped with SIGTERM as the kubelet stops it, ``ipvsproxy run`` started on kube-proxy's file
without any cleanup; then ipvsproxy stopped the same way and kube-proxy started again.

Each switch reports the requests made, the failed ones, the long-lived connections that kept
talking, the IPVS writes the new proxy made (each named) and the time from the old proxy's exit
to the new one's first completed sync.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ipvsproxy.kernel.iptables.backend import detect_backend
from tests.controlplane.bulk import NOT_FOUND, create_all, delete_all
from tests.controlplane.cluster import ADMIN_TOKEN, ApiError, ControlPlane
from tests.lab.daemon import LAST_SYNC, Daemon, stop_and_check
from tests.lab.kernel_state import ipvs_table
from tests.lab.kube_proxy import KubeProxy, KubeProxySettings
from tests.lab.load import Load, PhaseReport, Target
from tests.lab.netns import Node, Pod
from tests.lab.traffic import wait_until

JsonObject = dict[str, Any]
NODE = "node-a"
# The test's Services and EndpointSlices, taken out of the shared API server afterwards.
NAMESPACE = "takeover"
CONFLICT = 409
# Two pods behind each loaded cluster IP, and none shared between them. IPVS matches a reply
# by the client's address and port and the real server's, never the virtual address (and the
# source NAT of a masqueraded flow is undone before it looks), while the kernel hands a client
# the same source port again for another destination. One client reaching two virtual
# addresses that share a pod from one port makes two IPVS connections that answer to the same
# reply: the newer one, a closed short request's kept for its CLOSE timeout and refreshed by
# every packet, takes the long-lived flow's replies (a stall no proxy causes or can prevent).
# So each client reaches pods that no other virtual address it uses can: the NodePort and the
# external IP have an outside client each, the affinity client a pod of its own.
BACKENDS = {
    "load-0": ("backend-0a", "backend-0b"),
    "load-1": ("backend-1a", "backend-1b"),
    "load-2": ("backend-2a", "backend-2b"),
}
ALL_BACKENDS = tuple(name for names in BACKENDS.values() for name in names)
NODE_PORT = 30080
EXTERNAL_IP = "10.250.100.10"
# Outside the pod network: one client for the NodePort, one for the external IP.
OUTSIDE_CLIENTS = {
    "outside-node-port": ipaddress.IPv4Address("10.250.0.2"),
    "outside-external": ipaddress.IPv4Address("10.250.0.3"),
}
# The Services that carry the load, before the ones that fill the table.
LOADED = ("load-0", "load-1", "load-2", "load-node-port", "load-external", "load-affinity")
# How long the load runs on each side of a switch once it is done, and before the first.
SETTLE = 10.0
WARM_UP = 5.0
LONG_LIVED = 24
IPVS_KINDS = frozenset(
    {
        "AddVirtualServer",
        "UpdateVirtualServer",
        "DeleteVirtualServer",
        "AddRealServer",
        "UpdateRealServer",
        "DeleteRealServer",
    }
)
APPLIED = " debug applied: "
IPVS_WRITE_WORDS = ("virtual server", "real server")


@dataclass(frozen=True)
class Switch:
    name: str
    report: PhaseReport
    # Each IPVS write the new proxy made at the switch, in words.
    ipvs_writes: tuple[str, ...]
    seconds: float
    rate: float
    # When the old proxy was gone, in seconds from the phase's start.
    gone: float

    def line(self) -> str:
        report = self.report
        return (
            f"{self.name}: {report.requests} requests, {len(report.failed)} failed, "
            f"{report.long_lived_kept} long-lived connections kept, "
            f"{len(self.ipvs_writes)} IPVS writes, switch {self.seconds:.1f} s"
        )

    def details(self) -> str:
        report = self.report
        return (
            f"{self.name}: the old proxy gone at {self.gone:+.1f} s, the new one synced at "
            f"{self.gone + self.seconds:+.1f} s (from the phase's start); "
            f"{self.rate:.0f} short requests/s, {report.udp_requests} UDP, "
            f"{len(report.retransmitted)} retransmitted, {report.slow} slower than 1 s "
            f"(slowest {report.slowest:.2f} s), affinity {sorted(report.affinity_backends)}; "
            f"writes: {_first(self.ipvs_writes)}"
        )


def _first(writes: tuple[str, ...], shown: int = 3) -> str:
    more = f" and {len(writes) - shown} more" if len(writes) > shown else ""
    return "; ".join(writes[:shown]) + more if writes else "none"


@dataclass(frozen=True)
class Outcome:
    check_status: int
    check_output: str
    # The IPVS operations takeover --check planned, in words.
    predicted: tuple[str, ...]
    takeover: Switch
    handback: Switch
    services: int
    seconds_to_create: float
    kube_proxy_first_sync: float


# takeover --check's exit status, its text, and the IPVS operations it planned, in words.
Check = tuple[int, str, tuple[str, ...]]


def _service(name: str, ports: list[JsonObject], **spec: Any) -> JsonObject:
    return {
        "kind": "Service",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"ports": ports, **spec},
    }


def _slice(
    service: str, addresses: list[str], ports: list[JsonObject], node: str = NODE
) -> JsonObject:
    return {
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{service}-1",
            "namespace": NAMESPACE,
            "labels": {"kubernetes.io/service-name": service},
        },
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": [address], "conditions": {"ready": True}, "nodeName": node}
            for address in addresses
        ],
        "ports": ports,
    }


def _port(protocol: str, **extra: Any) -> JsonObject:
    return {"name": protocol.lower(), "port": 80, "protocol": protocol, "targetPort": 8080, **extra}


def cluster_objects(services: int, backends: dict[str, str]) -> list[JsonObject]:
    """``services`` Services and their EndpointSlices: the loaded ones on ``backends`` (pod
    name -> address), then fillers with two endpoints each on other nodes, which no traffic
    reaches (one in 100 a NodePort, one in 250 with an external IP). Endpoints on other nodes,
    as most are in a cluster: kube-proxy starts one ipset process per local endpoint's
    KUBE-LOOP-BACK entry, seconds each inside a loaded lab."""
    both = [_port("TCP"), _port("UDP")]
    slice_ports = [
        {"name": "tcp", "port": 8080, "protocol": "TCP"},
        {"name": "udp", "port": 8080, "protocol": "UDP"},
    ]
    loaded = [
        *(_service(name, both) for name in LOADED[:3]),
        _service("load-node-port", [_port("TCP", nodePort=NODE_PORT)], type="NodePort"),
        _service("load-external", [_port("TCP")], externalIPs=[EXTERNAL_IP]),
        _service("load-affinity", [_port("TCP")], sessionAffinity="ClientIP"),
    ]
    objects: list[JsonObject] = [*loaded]
    for service in loaded:
        name = service["metadata"]["name"]
        pods = BACKENDS.get(name, ALL_BACKENDS)
        objects.append(_slice(name, [backends[pod] for pod in pods], slice_ports))
    for index in range(services - len(loaded)):
        name = f"filler-{index}"
        spec: dict[str, Any] = {}
        if index % 100 == 99:
            spec["type"] = "NodePort"
        if index % 250 == 249:
            spec["externalIPs"] = [f"10.250.200.{index // 250 + 1}"]
        endpoints = [f"10.245.{index // 250}.{index % 250 + 1}", f"10.246.{index // 250}.{1}"]
        objects.append(_service(name, [_port("TCP")], **spec))
        objects.append(_slice(name, endpoints, slice_ports[:1], node="node-b"))
    return objects


def ensure_node(plane: ControlPlane, node: Node) -> None:
    """node-a in the API, with the lab node's addresses (kube-proxy waits for them)."""
    try:
        plane.request("GET", f"/api/v1/nodes/{NODE}")
    except ApiError as error:
        if error.status != NOT_FOUND:
            raise
        create_all(plane, [{"kind": "Node", "metadata": {"name": NODE, "labels": {
            "kubernetes.io/hostname": NODE}}}])  # fmt: skip
    addresses = [
        {"type": "InternalIP", "address": str(node.ipv4)},
        {"type": "InternalIP", "address": str(node.ipv6)},
        {"type": "Hostname", "address": NODE},
    ]
    plane.request(
        "PATCH",
        f"/api/v1/nodes/{NODE}/status",
        {"status": {"addresses": addresses}},
        content_type="application/merge-patch+json",
    )


@contextmanager
def cluster(plane: ControlPlane, objects: list[JsonObject]) -> Iterator[list[JsonObject]]:
    """``objects`` in the API server for the block (their namespace made first), then gone."""
    try:
        create_all(plane, [{"kind": "Namespace", "metadata": {"name": NAMESPACE}}])
    except ApiError as error:
        if error.status != CONFLICT:
            raise
    try:
        yield create_all(plane, objects)
    finally:
        delete_all(plane, objects)


@contextmanager
def pods(node: Node) -> Iterator[dict[str, Pod]]:
    made = {name: node.add_pod(name) for name in (*ALL_BACKENDS, "client", "sticky")}
    made.update((name, node.add_pod(name, ipv4)) for name, ipv4 in OUTSIDE_CLIENTS.items())
    try:
        yield made
    finally:
        for pod in made.values():
            node.remove_pod(pod)


def _ipvs_writes_logged(daemon: Daemon) -> tuple[str, ...]:
    """The IPVS operations the daemon logged as applied."""
    lines = daemon.log().splitlines()
    applied = (line.split(APPLIED, 1)[1] for line in lines if APPLIED in line)
    return tuple(text for text in applied if any(word in text for word in IPVS_WRITE_WORDS))


def _table_difference(before: set[str], after: set[str]) -> tuple[str, ...]:
    """What changed in ``ipvsadm -Sn``: kube-proxy does not tell its writes."""
    removed = (f"- {line}" for line in sorted(before - after))
    return (*removed, *(f"+ {line}" for line in sorted(after - before)))


def takeover_check(config: Path) -> Check:
    """``ipvsproxy takeover --check`` on kube-proxy's file, as the operator runs it: its exit
    status, its verdict, and the IPVS operations it planned."""
    done = subprocess.run(
        [
            *(sys.executable, "-m", "ipvsproxy", "takeover", "--check"),
            *("--config", str(config), "--hostname-override", NODE, "--output", "json"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        plan = json.loads(done.stdout)
    except ValueError:
        return done.returncode, done.stdout + done.stderr, ()
    planned = tuple(op["text"] for op in plan["operations"] if op["op"] in IPVS_KINDS)
    return done.returncode, json.dumps(plan["takeover"]) + done.stderr, planned


def run_takeover(
    plane: ControlPlane,
    binaries: Path,
    node: Node,
    folder: Path,
    *,
    services: int,
    rate: float = 250.0,
) -> Outcome:
    """The whole scenario on the lab's root namespace as ``node``, against ``plane``; the
    kube-proxy binary comes from ``binaries``."""
    backend = detect_backend()
    folder.mkdir(parents=True, exist_ok=True)
    kubeconfig = plane.write_kubeconfig(folder / "kubeconfig", ADMIN_TOKEN)
    kube_proxy = KubeProxy(binaries, folder, KubeProxySettings(kubeconfig), backend)
    ensure_node(plane, node)
    with pods(node) as made:
        backends = {name: str(made[name].ipv4) for name in ALL_BACKENDS}
        began = time.monotonic()
        with cluster(plane, cluster_objects(services, backends)) as created:
            seconds_to_create = time.monotonic() - began
            ips = {
                obj["metadata"]["name"]: obj["spec"]["clusterIP"]
                for obj in created
                if obj["kind"] == "Service" and obj["metadata"]["name"] in LOADED
            }
            started = time.time()
            kube_proxy.start()
            try:
                kube_proxy_first = kube_proxy.wait_first_sync() - started
                load = _load(made, ips, node, rate)
                check, takeover, handback = _switches(load, kube_proxy, folder)
            finally:
                kube_proxy.kill()
    return Outcome(
        *check,
        takeover=takeover,
        handback=handback,
        services=services,
        seconds_to_create=seconds_to_create,
        kube_proxy_first_sync=kube_proxy_first,
    )


def _load(made: dict[str, Pod], ips: dict[str, str], node: Node, rate: float) -> Load:
    client = made["client"].namespace
    cluster_ips = [Target(name, client, ips[name], 80) for name in LOADED[:3]]
    node_port = Target("node-port", made["outside-node-port"].namespace, str(node.ipv4), NODE_PORT)
    external = Target("external-ip", made["outside-external"].namespace, EXTERNAL_IP, 80)
    long_lived = [[*cluster_ips, node_port][index % 4] for index in range(LONG_LIVED)]
    return Load(
        pods={made[name].namespace: name for name in ALL_BACKENDS},
        short=[*cluster_ips, node_port, external],
        rate=rate,
        long_lived=long_lived,
        udp=[Target(f"{t.name}-udp", client, t.address, 80) for t in cluster_ips],
        udp_rate=rate / 10,
        affinity=Target("affinity", made["sticky"].namespace, ips["load-affinity"], 80),
    )


def _switches(load: Load, kube_proxy: KubeProxy, folder: Path) -> tuple[Check, Switch, Switch]:
    """takeover --check, the takeover and the hand-back, all under ``load``."""
    load.start()
    try:
        began = time.time()
        wait_until(
            lambda: all(c.exchanges for c in load.long_lived) and time.time() > began + WARM_UP,
            120,
            lambda: f"every long-lived connection talks: {[c.error for c in load.long_lived]}",
        )
        check = takeover_check(kube_proxy.config)
        daemon = Daemon(None, folder / "ipvsproxy.log", "-v", "4", config=kube_proxy.config)
        switched = kube_proxy.stop()
        try:
            daemon.start()
            ours_first = daemon.metrics().value(LAST_SYNC)
            time.sleep(SETTLE)
            # Every IPVS write of ipvsproxy's stay, the first sync's and any after.
            writes = _ipvs_writes_logged(daemon)
            before = ipvs_table()
            handed = time.time()
            stop_and_check(daemon)
        finally:
            if daemon.alive:
                daemon.process.kill()
        back = time.time()
        kube_proxy.start()
        kube_proxy_again = kube_proxy.wait_first_sync()
        time.sleep(SETTLE)
        after = ipvs_table()
    finally:
        load.stop()
    ended = time.time()
    takeover = Switch(
        "takeover",
        load.phase(began, handed, settled=ours_first),
        writes,
        ours_first - switched,
        load.rate_between(began, handed),
        switched - began,
    )
    handback = Switch(
        "handback",
        load.phase(handed, ended, settled=kube_proxy_again),
        _table_difference(before, after),
        kube_proxy_again - back,
        load.rate_between(handed, ended),
        back - handed,
    )
    return check, takeover, handback
