"""Service addresses on the dummy interface (kube-ipvs0), and the node's own addresses: the
kernel through rtnetlink (the fake: ``kernel.testing.FakeAddresses``).

Like kube-proxy, the interface is a dummy link left DOWN: the kernel still adds the local
routes that make its addresses ours, but never answers ARP/NDP for them on a real wire.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import struct
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from ipvsproxy.kernel.errors import refused
from ipvsproxy.kernel.netlink import (
    BATCH_SIZE,
    NLM_F_CREATE,
    NLM_F_DUMP,
    NLM_F_EXCL,
    NLMSG_HEADER,
    BatchSocket,
    Request,
    attribute,
    attributes,
    refusals_as_os_errors,
)
from ipvsproxy.model import AddressOp, BatchResult, BindAddress, IPAddress

if TYPE_CHECKING:
    from pyroute2.iproute.linux import IPRoute

IFA_F_NODAD = 0x02


def _prefix_length(address: IPAddress) -> int:
    return 32 if address.version == 4 else 128


# rtnetlink (linux/rtnetlink.h, linux/if_addr.h)
NETLINK_ROUTE = 0
RTM_NEWADDR = 20
RTM_DELADDR = 21
RTM_GETADDR = 22
IFA_ADDRESS = 1
IFA_LOCAL = 2
IFADDRMSG = struct.Struct("=BBBBI")  # family, prefix length, flags, scope, interface index
RTMGRP_IPV4_IFADDR = 0x10
RTMGRP_IPV6_IFADDR = 0x100
EVENT_BUFFER = 1 << 20


def address_request(op: AddressOp, index: int) -> Request:
    """What ``ip address add|del ADDRESS/32 dev NAME`` sends (/128 for IPv6, added without
    duplicate address detection)."""
    address = op.address
    family = socket.AF_INET if address.version == 4 else socket.AF_INET6
    flags = IFA_F_NODAD if address.version == 6 and isinstance(op, BindAddress) else 0
    body = (
        IFADDRMSG.pack(family, _prefix_length(address), flags, 0, index)
        + attribute(IFA_LOCAL, address.packed)
        + attribute(IFA_ADDRESS, address.packed)
    )
    if isinstance(op, BindAddress):
        return RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, body
    return RTM_DELADDR, 0, body


def decode_address(message: bytes) -> tuple[int, IPAddress] | None:
    """(interface index, address) of one dumped RTM_NEWADDR message; None without an address."""
    header = NLMSG_HEADER.size
    index = IFADDRMSG.unpack_from(message, header)[4]
    found = dict(attributes(message, header + IFADDRMSG.size))
    # IFA_LOCAL is the interface's own address where IFA_ADDRESS is a point-to-point peer.
    packed = found.get(IFA_LOCAL) or found.get(IFA_ADDRESS)
    return (index, ipaddress.ip_address(packed)) if packed else None


class _AddressEvents:
    """The kernel's address announcements, read without waiting: whether any concerned an
    interface other than one (kube-ipvs0, whose addresses we change ourselves) since the
    last look. Announcements lost to a full buffer count as such a change."""

    def __init__(self) -> None:
        self._socket = socket.socket(
            socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_NONBLOCK, NETLINK_ROUTE
        )
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, EVENT_BUFFER)
        self._socket.bind((0, RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR))

    def close(self) -> None:
        self._socket.close()

    def elsewhere(self, interface: int | None) -> bool:
        changed = False
        while True:
            try:
                data = self._socket.recv(1 << 16)
            except BlockingIOError:
                return changed
            except OSError as error:
                if error.errno != errno.ENOBUFS:
                    raise
                changed = True
                continue
            offset = 0
            while offset + NLMSG_HEADER.size + IFADDRMSG.size <= len(data):
                length, kind = NLMSG_HEADER.unpack_from(data, offset)[:2]
                index = IFADDRMSG.unpack_from(data, offset + NLMSG_HEADER.size)[4]
                changed |= kind in (RTM_NEWADDR, RTM_DELADDR) and index != interface
                offset += max((length + 3) & ~3, NLMSG_HEADER.size)


class NetlinkAddresses:
    """Links made and deleted through pyroute2; addresses through a BatchSocket, many
    requests per sendmsg; an interface's index from if_nametoindex.

    pyroute2 sent one request per round trip and decoded every reply in Python: binding
    10,000 service addresses, or reading them back each sync, cost seconds in the lab. Its
    IPRoute is made only for a link to make or delete: importing it (asyncio with it) was a
    third of a no-op ``sync --once``'s imports.
    """

    def __init__(self, batch_size: int = BATCH_SIZE) -> None:
        self._route: IPRoute | None = None
        self._socket = BatchSocket(NETLINK_ROUTE, batch_size)
        # Listening before the first reading, so no change between the two is missed.
        self._events = _AddressEvents()
        self._local: tuple[int | None, frozenset[IPAddress]] | None = None

    def close(self) -> None:
        if self._route is not None:
            self._route.close()
        self._socket.close()
        self._events.close()

    def _links(self) -> IPRoute:
        if self._route is None:
            from pyroute2.iproute.linux import IPRoute as Links  # noqa: PLC0415

            self._route = Links()
        return self._route

    def __enter__(self) -> NetlinkAddresses:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _index(self, name: str) -> int | None:
        try:
            return socket.if_nametoindex(name)
        except OSError:
            # ENODEV: no such interface.
            return None

    def interface_exists(self, name: str) -> bool:
        return self._index(name) is not None

    def ensure_interface(self, name: str) -> None:
        with refusals_as_os_errors():
            if not self.interface_exists(name):
                # No transmit queue, as kube-proxy's (netlink's zero TxQLen): nothing is ever
                # sent on a link that stays down.
                self._links().link("add", ifname=name, kind="dummy", txqlen=0)

    def delete_interface(self, name: str) -> None:
        with refusals_as_os_errors():
            index = self._index(name)
            if index is not None:
                self._links().link("del", index=index)

    def _dump(self) -> Iterator[tuple[int, IPAddress]]:
        """(interface index, address) of every address the kernel has."""
        request = IFADDRMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
        for message in self._socket.request(RTM_GETADDR, NLM_F_DUMP, request):
            found = decode_address(message)
            if found is not None:
                yield found

    def addresses(self, name: str) -> frozenset[IPAddress]:
        index = self._index(name)
        if index is None:
            return frozenset()
        return frozenset(address for owner, address in self._dump() if owner == index)

    def all_addresses(self) -> frozenset[IPAddress]:
        return frozenset(address for _, address in self._dump())

    def listed(self, name: str) -> Iterator[tuple[IPAddress, bool]]:
        index = self._index(name)
        for owner, address in self._dump():
            yield address, owner == index

    def local_addresses(self, except_interface: str) -> frozenset[IPAddress]:
        """Read again only when the kernel announced a change on another interface: the dump
        holds every service address too, and a sync that binds none need not walk them."""
        index = self._index(except_interface)
        elsewhere = self._events.elsewhere(index)
        if self._local is None or elsewhere or self._local[0] != index:
            found = frozenset(address for owner, address in self._dump() if owner != index)
            self._local = (index, found)
        return self._local[1]

    def apply(self, name: str, ops: Sequence[AddressOp]) -> BatchResult:
        index = self._index(name)
        if index is None:
            return [refused(errno.ENODEV) for _ in ops]
        return self._socket.apply([address_request(op, index) for op in ops])
