"""Desired states, a manual clock and a refusing IPVS for the reconciler's unit tests."""

from __future__ import annotations

import errno
import ipaddress
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from ipvsproxy.kernel.testing import FakeIPVS
from ipvsproxy.model import (
    AddressKind,
    BatchResult,
    DesiredState,
    DesiredVirtualServer,
    IPAddress,
    IPSetContent,
    IptablesRuleset,
    IPVSOp,
    IPVSTable,
    IPVSTimeouts,
    ObjectKey,
    OpError,
    RealServer,
    RealServerKey,
    ServicePortName,
    TransportProtocol,
    VirtualServer,
    VirtualServerKey,
    VirtualServerState,
)


def ip(text: str) -> IPAddress:
    return ipaddress.ip_address(text)


VIP = ip("10.96.0.10")
TCP_VS = VirtualServerKey(TransportProtocol.TCP, VIP, 80)
UDP_VS = VirtualServerKey(TransportProtocol.UDP, VIP, 53)
STALE_VS = VirtualServerKey(TransportProtocol.TCP, ip("10.96.0.20"), 80)
POD_A = RealServer(RealServerKey(ip("10.244.1.2"), 8080))
POD_B = RealServer(RealServerKey(ip("10.244.1.3"), 8080))
POD_C = RealServer(RealServerKey(ip("10.244.1.4"), 8080))


def desired(
    servers: Mapping[VirtualServerKey, Iterable[RealServer]],
    *,
    node_ports: Iterable[VirtualServerKey] = (),
    node_addresses: Iterable[IPAddress] = (),
    exclude: Sequence[str] = (),
    ipsets: Mapping[str, IPSetContent] | None = None,
    iptables: tuple[IptablesRuleset, ...] = (),
) -> DesiredState:
    """ClusterIP virtual servers (bound on kube-ipvs0), plus ``node_ports`` among them."""
    node_port_keys = set(node_ports)
    wanted = {
        key: DesiredVirtualServer(
            VirtualServer(key),
            MappingProxyType({r.key: r for r in reals}),
            ServicePortName(ObjectKey("default", "web"), "http", key.protocol),
            AddressKind.NODE_PORT if key in node_port_keys else AddressKind.CLUSTER_IP,
        )
        for key, reals in servers.items()
    }
    return DesiredState(
        virtual_servers=MappingProxyType(wanted),
        bound_addresses=frozenset(k.address for k in wanted if k not in node_port_keys),
        node_addresses=frozenset(node_addresses) | {k.address for k in node_port_keys},
        ipsets=MappingProxyType(dict(ipsets or {})),
        iptables=iptables,
        exclude_cidrs=tuple(ipaddress.ip_network(cidr) for cidr in exclude),
    )


@dataclass
class ManualClock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


EXISTS = OpError(errno.EEXIST, os.strerror(errno.EEXIST))


@dataclass
class RefusingIPVS:
    """A FakeIPVS that refuses the listed ops (while they are listed) with ``error``."""

    inner: FakeIPVS
    refuse: set[IPVSOp] = field(default_factory=set)
    error: OpError = EXISTS

    def dump(self, *, real_servers: bool = True, traffic: bool = True) -> IPVSTable:
        return self.inner.dump(real_servers=real_servers, traffic=traffic)

    def listed(self) -> Iterator[VirtualServerState]:
        return self.inner.listed()

    def virtual_server(self, key: VirtualServerKey) -> VirtualServerState | None:
        return self.inner.virtual_server(key)

    def with_real_servers(
        self, listed: VirtualServerState, *, traffic: bool = True
    ) -> VirtualServerState | None:
        return self.inner.with_real_servers(listed, traffic=traffic)

    def apply(self, ops: Sequence[IPVSOp]) -> BatchResult:
        return [self.error if op in self.refuse else self.inner.apply([op])[0] for op in ops]

    def timeouts(self) -> IPVSTimeouts:
        return self.inner.timeouts()

    def set_timeouts(self, timeouts: IPVSTimeouts) -> None:
        self.inner.set_timeouts(timeouts)


def weights(table: IPVSTable, key: VirtualServerKey) -> dict[RealServerKey, int]:
    return {real: state.server.weight for real, state in table[key].real_servers.items()}
