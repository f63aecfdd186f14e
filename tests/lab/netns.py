"""Network namespaces as pods, the node they hang off, and sockets opened inside them.

A socket keeps the namespace it was created in, so servers and clients run as threads of the
test process: ``inside(namespace)`` switches only the calling thread (setns(2)) and back.
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import socket
import socketserver
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)

NODE_IPV4 = ipaddress.IPv4Address("10.240.0.10")
NODE_IPV6 = ipaddress.IPv6Address("fd00:10:240::10")
POD_GATEWAY_IPV4 = "169.254.1.1"
POD_GATEWAY_IPV6 = "fe80::1"
POD_CIDR_IPV4 = ipaddress.IPv4Network("10.244.1.0/24")
POD_CIDR_IPV6 = ipaddress.IPv6Network("fd00:10:244:1::/64")


def sh(*args: str, stdin: str | None = None) -> str:
    done = subprocess.run(args, input=stdin, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def _setns(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {path}")
    finally:
        os.close(fd)


@contextmanager
def inside(namespace: str | None) -> Iterator[None]:
    """Run the block in ``namespace`` (None: the node's own)."""
    if namespace is None:
        yield
        return
    original = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        _setns(f"/run/netns/{namespace}")
        yield
    finally:
        _libc.setns(original, CLONE_NEWNET)
        os.close(original)


def ip_batch(lines: list[str], namespace: str | None = None) -> None:
    """Several ``ip`` commands in one process (in ``namespace``): a process start is the
    dearest thing inside the lab."""
    in_namespace = ("-n", namespace) if namespace else ()
    sh("ip", *in_namespace, "-batch", "-", stdin="\n".join(lines))


def sysctl(name: str, value: str) -> None:
    """Set a sysctl of the node's own namespace."""
    Path("/proc/sys", *name.split(".")).write_text(value)


class _NameReplyTCP(socketserver.BaseRequestHandler):
    """Answers every line a client sends with the pod's name, until the client closes."""

    def handle(self) -> None:
        name = self.server.pod_name  # type: ignore[attr-defined]
        stream = self.request.makefile("rb")
        for _ in stream:
            self.request.sendall(f"{name}\n".encode())


class _NameReplyUDP(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        _data, sock = self.request
        sock.sendto(self.server.pod_name.encode(), self.client_address)  # type: ignore[attr-defined]


class _DualStack(socketserver.TCPServer):
    """Listens on :: for both families, so one server answers IPv4 and IPv6 clients."""

    address_family = socket.AF_INET6
    allow_reuse_address = True
    daemon_threads = True
    pod_name = ""

    def server_bind(self) -> None:
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


class _DualStackTCP(_DualStack, socketserver.ThreadingTCPServer):
    pass


class _DualStackUDP(_DualStack, socketserver.ThreadingUDPServer):
    pass


def serve_names(
    name: str, port: int, namespace: str | None = None
) -> list[socketserver.BaseServer]:
    """TCP and UDP servers on ``port`` of ``namespace`` (None: the node) answering ``name``."""
    servers: list[socketserver.BaseServer] = []
    with inside(namespace):
        made: tuple[_DualStack, ...] = (
            _DualStackTCP(("::", port), _NameReplyTCP),
            _DualStackUDP(("::", port), _NameReplyUDP),
        )
        for server in made:
            server.pod_name = name
            threading.Thread(target=server.serve_forever, daemon=True).start()
            servers.append(server)
    return servers


def stop_servers(servers: list[socketserver.BaseServer]) -> None:
    for server in servers:
        server.shutdown()
        server.server_close()
    servers.clear()


@dataclass
class Pod:
    name: str
    namespace: str
    ipv4: ipaddress.IPv4Address
    ipv6: ipaddress.IPv6Address
    host_veth: str
    servers: list[socketserver.BaseServer] = field(default_factory=list)

    def serve(self, port: int = 8080) -> None:
        """Start TCP and UDP servers on ``port`` (both families) that answer with the pod's name."""
        self.servers += serve_names(self.name, port, self.namespace)

    def stop(self) -> None:
        stop_servers(self.servers)


class Node:
    """The lab kernel's root namespace dressed as a Kubernetes node."""

    def __init__(self) -> None:
        self.ipv4 = NODE_IPV4
        self.ipv6 = NODE_IPV6
        self.pods: list[Pod] = []
        # Never reused, so a pod made after another was removed gets fresh names and addresses.
        self._next_index = 2

    def set_up(self) -> None:
        ip_batch(
            [
                "link add eth0 type dummy",
                "link set eth0 up",
                f"addr add {self.ipv4}/24 dev eth0",
                f"addr add {self.ipv6}/64 dev eth0 nodad",
            ]
        )
        sysctl("net.ipv4.ip_forward", "1")
        sysctl("net.ipv6.conf.all.forwarding", "1")

    def add_pod(self, name: str, ipv4: ipaddress.IPv4Address | None = None) -> Pod:
        """A pod at the next free address, or at ``ipv4`` (to recreate a manifest's endpoints)."""
        index = self._next_index
        self._next_index += 1
        pod = Pod(
            name=name,
            namespace=f"pod-{name}",
            ipv4=ipv4 or POD_CIDR_IPV4[index],
            ipv6=POD_CIDR_IPV6[index],
            host_veth=f"veth{index}",
        )
        ns, veth = pod.namespace, pod.host_veth
        # Calico-style: the pod routes everything through a link-local gateway on the node side.
        ip_batch(
            [
                f"netns add {ns}",
                f"link add {veth} type veth peer name eth0 netns {ns}",
                f"addr add {POD_GATEWAY_IPV4}/32 dev {veth}",
                f"addr add {POD_GATEWAY_IPV6}/64 dev {veth} nodad",
                f"link set {veth} up",
                f"route add {pod.ipv4}/32 dev {veth}",
                f"route add {pod.ipv6}/128 dev {veth}",
            ]
        )
        ip_batch(
            [
                "link set lo up",
                f"addr add {pod.ipv4}/32 dev eth0",
                f"addr add {pod.ipv6}/128 dev eth0 nodad",
                "link set eth0 up",
                f"route add {POD_GATEWAY_IPV4} dev eth0 scope link",
                f"route add 0.0.0.0/0 via {POD_GATEWAY_IPV4} dev eth0",
                f"route add ::/0 via {POD_GATEWAY_IPV6} dev eth0",
            ],
            namespace=ns,
        )
        self.pods.append(pod)
        return pod

    def remove_pod(self, pod: Pod) -> None:
        pod.stop()
        ip_batch([f"link del {pod.host_veth}", f"netns del {pod.namespace}"])
        self.pods.remove(pod)

    def tear_down(self) -> None:
        for pod in self.pods:
            pod.stop()
        removals = [f"link del {pod.host_veth}\nnetns del {pod.namespace}" for pod in self.pods]
        ip_batch([*removals, "link del eth0"])
        self.pods.clear()


def family_of(address: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ipaddress.ip_address(address).version == 6 else socket.AF_INET


class Client:
    """Opens connections from one namespace (None: from the node itself)."""

    def __init__(self, namespace: str | None, timeout: float = 5.0) -> None:
        self.namespace = namespace
        self.timeout = timeout

    def connect(self, address: str, port: int) -> socket.socket:
        with inside(self.namespace):
            sock = socket.socket(family_of(address), socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect((address, port))
        return sock

    def tcp_names(self, address: str, port: int, count: int) -> Counter[str]:
        """``count`` fresh TCP connections, each asking once who answers."""
        names: Counter[str] = Counter()
        for _ in range(count):
            with self.connect(address, port) as sock:
                names[ask(sock)] += 1
        return names

    def udp_names(self, address: str, port: int, count: int) -> Counter[str]:
        names: Counter[str] = Counter()
        for _ in range(count):
            with inside(self.namespace):
                sock = socket.socket(family_of(address), socket.SOCK_DGRAM)
            with sock:
                sock.settimeout(self.timeout)
                names[_ask_datagram(sock, (address, port))] += 1
        return names


# A datagram can be lost (a loaded lab lost an IPv6 request twice, in test_conntrack_udp); asking
# again on the same socket is the same flow, so it lands on the same real server, and a black
# hole (a flow kept to a deleted pod) still fails every time.
UDP_ATTEMPTS = 3


def _ask_datagram(sock: socket.socket, to: tuple[str, int]) -> str:
    for _ in range(UDP_ATTEMPTS - 1):
        sock.sendto(b"who\n", to)
        with suppress(TimeoutError):
            return sock.recv(256).decode()
    sock.sendto(b"who\n", to)
    return sock.recv(256).decode()


def ask(sock: socket.socket) -> str:
    """One request on an open connection: the name of the pod that answers it."""
    sock.sendall(b"who\n")
    reply = b""
    while not reply.endswith(b"\n"):
        chunk = sock.recv(256)
        if not chunk:
            raise ConnectionError("connection closed before the pod answered")
        reply += chunk
    return reply.decode().strip()
