"""Service addresses on the dummy interface (kube-ipvs0): the kernel through rtnetlink, and a fake.

Like kube-proxy, the interface is a dummy link left DOWN: the kernel still adds the local
routes that make its addresses ours, but never answers ARP/NDP for them on a real wire.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
from collections.abc import Sequence

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from ipvsproxy.kernel.netlink import refusals_as_os_errors
from ipvsproxy.model import AddressOp, BatchResult, BindAddress, IPAddress, OpError

IFA_F_NODAD = 0x02


def _prefix_length(address: IPAddress) -> int:
    return 32 if address.version == 4 else 128


def _refusal(code: int) -> OpError:
    return OpError(code, os.strerror(code))


class NetlinkAddresses:
    """One rtnetlink request per op; each refusal becomes that op's OpError."""

    def __init__(self) -> None:
        self._route = IPRoute()

    def close(self) -> None:
        self._route.close()

    def __enter__(self) -> NetlinkAddresses:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _index(self, name: str) -> int | None:
        found = self._route.link_lookup(ifname=name)
        return int(found[0]) if found else None

    def interface_exists(self, name: str) -> bool:
        return self._index(name) is not None

    def ensure_interface(self, name: str) -> None:
        with refusals_as_os_errors():
            if not self.interface_exists(name):
                self._route.link("add", ifname=name, kind="dummy")

    def delete_interface(self, name: str) -> None:
        with refusals_as_os_errors():
            index = self._index(name)
            if index is not None:
                self._route.link("del", index=index)

    def addresses(self, name: str) -> frozenset[IPAddress]:
        index = self._index(name)
        if index is None:
            return frozenset()
        return frozenset(
            ipaddress.ip_address(message.get_attr("IFA_ADDRESS"))
            for message in self._route.get_addr(index=index)
        )

    def all_addresses(self) -> frozenset[IPAddress]:
        # IFA_LOCAL is the interface's own address where IFA_ADDRESS is a point-to-point peer.
        return frozenset(
            ipaddress.ip_address(message.get_attr("IFA_LOCAL") or message.get_attr("IFA_ADDRESS"))
            for message in self._route.get_addr()
        )

    def apply(self, name: str, ops: Sequence[AddressOp]) -> BatchResult:
        index = self._index(name)
        if index is None:
            return [_refusal(errno.ENODEV) for _ in ops]
        results: BatchResult = []
        for op in ops:
            command = "add" if isinstance(op, BindAddress) else "del"
            family = socket.AF_INET if op.address.version == 4 else socket.AF_INET6
            try:
                self._route.addr(
                    command,
                    index=index,
                    family=family,
                    address=str(op.address),
                    prefixlen=_prefix_length(op.address),
                    flags=IFA_F_NODAD if op.address.version == 6 else 0,
                )
            except NetlinkError as error:
                results.append(_refusal(error.code))
            else:
                results.append(None)
        return results


class FakeAddresses:
    """In-memory interfaces and addresses, refusing with the kernel's errnos."""

    def __init__(self) -> None:
        self._interfaces: dict[str, set[IPAddress]] = {}

    def interface_exists(self, name: str) -> bool:
        return name in self._interfaces

    def ensure_interface(self, name: str) -> None:
        self._interfaces.setdefault(name, set())

    def delete_interface(self, name: str) -> None:
        self._interfaces.pop(name, None)

    def addresses(self, name: str) -> frozenset[IPAddress]:
        return frozenset(self._interfaces.get(name, ()))

    def all_addresses(self) -> frozenset[IPAddress]:
        return frozenset().union(*self._interfaces.values())

    def apply(self, name: str, ops: Sequence[AddressOp]) -> BatchResult:
        bound = self._interfaces.get(name)
        if bound is None:
            return [_refusal(errno.ENODEV) for _ in ops]
        results: BatchResult = []
        for op in ops:
            if isinstance(op, BindAddress):
                refused = op.address in bound
                bound.add(op.address)
                results.append(_refusal(errno.EEXIST) if refused else None)
            else:
                refused = op.address not in bound
                bound.discard(op.address)
                results.append(_refusal(errno.EADDRNOTAVAIL) if refused else None)
        return results
