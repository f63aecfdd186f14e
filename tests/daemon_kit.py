"""A generated cluster as API objects, and a fake kernel that records what it is asked."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from ipaddress import ip_address
from typing import Any

from ipvsproxy.kernel.protocols import Kernel
from ipvsproxy.kernel.testing import FakeIPVS, FakeKernel
from ipvsproxy.model import (
    SCHEDULERS,
    BatchResult,
    BindAddress,
    IPVSOp,
    IPVSTable,
    IPVSTimeouts,
    OpError,
    VirtualServerKey,
    VirtualServerState,
)

NODE = "node-a"
NODE_IP = "192.168.10.11"


def node(name: str = NODE, address: str = NODE_IP, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, **extra.pop("metadata", {})},
        "spec": extra.pop("spec", {}),
        "status": {"addresses": [{"type": "InternalIP", "address": address}]},
    }


def service_ip(index: int) -> str:
    return f"10.96.{index // 250}.{index % 250 + 1}"


def service(index: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": f"svc-{index}", "namespace": "default"},
        "spec": {
            "type": "ClusterIP",
            "clusterIP": service_ip(index),
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}],
            **spec,
        },
    }


def endpoint_slice(
    index: int, endpoints: int = 2, first: int = 0, node_name: str = NODE
) -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"svc-{index}-abcde",
            "namespace": "default",
            "labels": {"kubernetes.io/service-name": f"svc-{index}"},
        },
        "addressType": "IPv4",
        "endpoints": [
            {
                "addresses": [f"10.{128 + index // 250}.{index % 250}.{n + 1}"],
                "conditions": {"ready": True},
                "nodeName": node_name,
            }
            for n in range(first, first + endpoints)
        ],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }


def cluster(services: int, endpoints: int = 2) -> list[dict[str, Any]]:
    objects = [node()]
    for index in range(services):
        objects += [service(index), endpoint_slice(index, endpoints)]
    return objects


class RecordingIPVS:
    """FakeIPVS that remembers every op it was given and every read."""

    def __init__(self, schedulers: Collection[str] = SCHEDULERS) -> None:
        self.fake = FakeIPVS(schedulers)
        self.ops: list[IPVSOp] = []
        # Set, an op it answers with an error gets that error instead of being applied.
        self.failing: Callable[[IPVSOp], OpError | None] | None = None
        self.dumps = 0
        # The virtual servers read one by one, in order.
        self.reads: list[VirtualServerKey] = []
        # Set, every call raises: a kernel interface broken in a way no op result describes.
        self.broken = False

    def dump(self, *, real_servers: bool = True, traffic: bool = True) -> IPVSTable:
        self._check()
        self.dumps += 1
        return self.fake.dump(real_servers=real_servers, traffic=traffic)

    def listed(self) -> Iterator[VirtualServerState]:
        self._check()
        self.dumps += 1
        return self.fake.listed()

    def virtual_server(self, key: VirtualServerKey) -> VirtualServerState | None:
        self._check()
        self.reads.append(key)
        return self.fake.virtual_server(key)

    def with_real_servers(
        self, listed: VirtualServerState, *, traffic: bool = True
    ) -> VirtualServerState | None:
        self._check()
        self.reads.append(listed.server.key)
        return self.fake.with_real_servers(listed, traffic=traffic)

    def apply(self, ops: Sequence[IPVSOp]) -> BatchResult:
        self._check()
        self.ops += ops
        if self.failing is None:
            return self.fake.apply(ops)
        return [self.failing(op) or self.fake.apply([op])[0] for op in ops]

    def timeouts(self) -> IPVSTimeouts:
        self._check()
        return self.fake.timeouts()

    def set_timeouts(self, timeouts: IPVSTimeouts) -> None:
        self._check()
        self.fake.set_timeouts(timeouts)

    def _check(self) -> None:
        if self.broken:
            raise RuntimeError("the IPVS socket is broken")


def with_node_interface(fake: FakeKernel, *addresses: str) -> FakeKernel:
    """``fake`` with the node's own addresses on an ``eth0``, as a node's kernel has them."""
    fake.addresses.ensure_interface("eth0")
    fake.addresses.apply("eth0", [BindAddress(ip_address(address)) for address in addresses])
    return fake


class RecordingKernel(FakeKernel):
    def __init__(self, schedulers: Collection[str] = SCHEDULERS) -> None:
        super().__init__()
        self.recording = RecordingIPVS(schedulers)
        with_node_interface(self, NODE_IP)

    def kernel(self) -> Kernel:
        return Kernel(
            self.recording, self.addresses, self.ipsets, self.iptables, self.sysctl, self.conntrack
        )

    def take_ops(self) -> list[IPVSOp]:
        ops, self.recording.ops = self.recording.ops, []
        return ops
