"""IPVS virtual servers: the real kernel over generic netlink (the fake: ``kernel.testing``).

``NetlinkIPVS`` encodes its requests itself (the kernel's numbers in ``ipvs_abi``) and sends
them through a ``BatchSocket``, many per ``sendmsg``, so one refused op becomes that op's
``OpError`` while the rest still apply.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import struct
import sys
from collections.abc import Iterator, Sequence
from typing import Any, assert_never

from ipvsproxy.kernel import ipvs_abi as abi
from ipvsproxy.kernel.errors import IPVSUnavailable, refused
from ipvsproxy.kernel.netlink import (
    BATCH_SIZE,
    NETLINK_GENERIC,
    NLM_F_CREATE,
    NLM_F_DUMP,
    NLM_F_EXCL,
    NLMSG_HEADER,
    BatchSocket,
    attribute,
    attributes,
    generic_family_id,
)
from ipvsproxy.model import (
    IP_PROTOCOL_NUMBERS,
    PROTOCOLS_BY_NUMBER,
    AddRealServer,
    AddVirtualServer,
    BatchResult,
    DeleteRealServer,
    DeleteVirtualServer,
    ForwardMethod,
    IPAddress,
    IPVSOp,
    IPVSTable,
    IPVSTimeouts,
    RealServer,
    RealServerKey,
    RealServerState,
    ServiceFlags,
    TrafficStats,
    UpdateRealServer,
    UpdateVirtualServer,
    VirtualServer,
    VirtualServerKey,
    VirtualServerState,
)

WRITABLE_FLAGS = ~ServiceFlags.HASHED & 0xFFFF
# What a fresh kernel has (ipvsadm -L --timeout: 900 120 300).
KERNEL_DEFAULT_TIMEOUTS = IPVSTimeouts(tcp=900, tcp_fin=120, udp=300)
GENL_HEADER = struct.Struct("=BBH")


def _family(address: IPAddress) -> int:
    return socket.AF_INET if address.version == 4 else socket.AF_INET6


def _service_key_attrs(key: VirtualServerKey) -> list[tuple[str, Any]]:
    return [
        ("IPVS_SVC_ATTR_AF", _family(key.address)),
        ("IPVS_SVC_ATTR_PROTOCOL", IP_PROTOCOL_NUMBERS[key.protocol]),
        ("IPVS_SVC_ATTR_ADDR", str(key.address)),
        ("IPVS_SVC_ATTR_PORT", key.port),
    ]


def _service_attrs(server: VirtualServer) -> list[tuple[str, Any]]:
    # The kernel reads an IPv6 netmask as a prefix length in host byte order.
    netmask = (
        "255.255.255.255"
        if server.key.address.version == 4
        else socket.inet_ntoa(struct.pack("=I", 128))
    )
    return [
        *_service_key_attrs(server.key),
        ("IPVS_SVC_ATTR_SCHED_NAME", server.scheduler),
        ("IPVS_SVC_ATTR_FLAGS", {"flags": server.flags & WRITABLE_FLAGS, "mask": WRITABLE_FLAGS}),
        ("IPVS_SVC_ATTR_TIMEOUT", server.timeout),
        ("IPVS_SVC_ATTR_NETMASK", netmask),
    ]


def _dest_key_attrs(key: RealServerKey) -> list[tuple[str, Any]]:
    return [
        ("IPVS_DEST_ATTR_ADDR_FAMILY", _family(key.address)),
        ("IPVS_DEST_ATTR_ADDR", str(key.address)),
        ("IPVS_DEST_ATTR_PORT", key.port),
    ]


def _dest_attrs(server: RealServer) -> list[tuple[str, Any]]:
    return [
        *_dest_key_attrs(server.key),
        ("IPVS_DEST_ATTR_FWD_METHOD", int(server.forward)),
        ("IPVS_DEST_ATTR_WEIGHT", server.weight),
        ("IPVS_DEST_ATTR_U_THRESH", server.upper_threshold),
        ("IPVS_DEST_ATTR_L_THRESH", server.lower_threshold),
    ]


def _request(op: IPVSOp) -> tuple[int, int, list[tuple[str, Any]]]:
    """The command, extra netlink flags and attributes that carry one op."""
    service = "IPVS_CMD_ATTR_SERVICE"
    match op:
        case AddVirtualServer(server):
            create = NLM_F_CREATE | NLM_F_EXCL
            return abi.IPVS_CMD_NEW_SERVICE, create, [(service, _nla(_service_attrs(server)))]
        case UpdateVirtualServer(server):
            return abi.IPVS_CMD_SET_SERVICE, 0, [(service, _nla(_service_attrs(server)))]
        case DeleteVirtualServer(key):
            return abi.IPVS_CMD_DEL_SERVICE, 0, _service_request(key)
        case AddRealServer(virtual, server):
            attrs = _dest_request(virtual, _dest_attrs(server))
            return abi.IPVS_CMD_NEW_DEST, NLM_F_CREATE | NLM_F_EXCL, attrs
        case UpdateRealServer(virtual, server):
            attrs = _dest_request(virtual, _dest_attrs(server))
            return abi.IPVS_CMD_SET_DEST, 0, attrs
        case DeleteRealServer(virtual, key):
            attrs = _dest_request(virtual, _dest_key_attrs(key))
            return abi.IPVS_CMD_DEL_DEST, 0, attrs
        case _:
            assert_never(op)


def _service_request(key: VirtualServerKey) -> list[tuple[str, Any]]:
    """The attributes that name one service in a request about it or its destinations."""
    return [("IPVS_CMD_ATTR_SERVICE", _nla(_service_key_attrs(key)))]


def _dest_request(virtual: VirtualServerKey, dest: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    return [*_service_request(virtual), ("IPVS_CMD_ATTR_DEST", _nla(dest))]


def _nla(attrs: list[tuple[str, Any]]) -> dict[str, Any]:
    return {"attrs": attrs}


# Encoding attributes by hand here is several times faster than pyroute2's generic encoder,
# which dominated the cost of a large batch.
ATTRIBUTE_TYPES = {
    name: kind
    for names in (
        abi.COMMAND_ATTRIBUTES,
        abi.SERVICE_ATTRIBUTES,
        abi.DEST_ATTRIBUTES,
        abi.STATS_ATTRIBUTES,
    )
    for kind, name in enumerate(names)
}
NATIVE_U16 = {"IPVS_SVC_ATTR_AF", "IPVS_SVC_ATTR_PROTOCOL", "IPVS_DEST_ATTR_ADDR_FAMILY"}
BIG_ENDIAN_U16 = {"IPVS_SVC_ATTR_PORT", "IPVS_DEST_ATTR_PORT"}
ADDRESSES = {"IPVS_SVC_ATTR_ADDR", "IPVS_DEST_ATTR_ADDR"}


def _encode_value(name: str, value: Any) -> bytes:
    if isinstance(value, dict) and "attrs" in value:
        return _encode_attrs(value["attrs"])
    if name in NATIVE_U16:
        return struct.pack("=H", value)
    if name in BIG_ENDIAN_U16:
        return struct.pack(">H", value)
    if name in ADDRESSES:
        return ipaddress.ip_address(value).packed
    if name == "IPVS_SVC_ATTR_SCHED_NAME":
        return str(value).encode() + b"\0"
    if name == "IPVS_SVC_ATTR_FLAGS":
        return struct.pack("=II", value["flags"], value["mask"])
    if name == "IPVS_SVC_ATTR_NETMASK":
        return socket.inet_aton(value)
    return struct.pack("=I", value)


def _encode_attrs(attrs: list[tuple[str, Any]]) -> bytes:
    return b"".join(
        attribute(ATTRIBUTE_TYPES[name], _encode_value(name, value)) for name, value in attrs
    )


def genl_body(command: int, attrs: list[tuple[str, Any]]) -> bytes:
    """A request's generic netlink header and attributes: what follows the netlink header."""
    return GENL_HEADER.pack(command, abi.GENL_VERSION, 0) + _encode_attrs(attrs)


def encode_op(op: IPVSOp) -> tuple[int, bytes]:
    """The extra netlink flags and the body of the request that carries ``op``."""
    command, flags, attrs = _request(op)
    return flags, genl_body(command, attrs)


def encode_timeouts(timeouts: IPVSTimeouts) -> bytes:
    """The body of the request that sets the timeouts (ipvsadm --set)."""
    return genl_body(abi.IPVS_CMD_SET_CONFIG, _timeout_attrs(timeouts))


def _timeout_attrs(timeouts: IPVSTimeouts) -> list[tuple[str, Any]]:
    """The timeouts to set: the kernel leaves one it is not given (or given 0) as it is."""
    return [
        (name, seconds)
        for name, seconds in (
            ("IPVS_CMD_ATTR_TIMEOUT_TCP", timeouts.tcp),
            ("IPVS_CMD_ATTR_TIMEOUT_TCP_FIN", timeouts.tcp_fin),
            ("IPVS_CMD_ATTR_TIMEOUT_UDP", timeouts.udp),
        )
        if seconds
    ]


# Dumped messages are decoded here too, for the same reason: pyroute2's decoder cost more than
# the kernel's whole dump.
Attributes = dict[int, bytes]
_T = ATTRIBUTE_TYPES
_STATS_FIELDS = (
    ("connections", "IPVS_STATS_ATTR_CONNS"),
    ("packets_in", "IPVS_STATS_ATTR_INPKTS"),
    ("packets_out", "IPVS_STATS_ATTR_OUTPKTS"),
    ("bytes_in", "IPVS_STATS_ATTR_INBYTES"),
    ("bytes_out", "IPVS_STATS_ATTR_OUTBYTES"),
)


def _number(attrs: Attributes, name: str) -> int:
    """An unsigned attribute in host byte order, whatever its width; 0 when absent."""
    return int.from_bytes(attrs.get(_T[name], b""), sys.byteorder)


def _port(attrs: Attributes, name: str) -> int:
    return int.from_bytes(attrs[_T[name]], "big")


def _address(attrs: Attributes, name: str, family: int) -> IPAddress:
    # The kernel sends a union nf_inet_addr: 16 bytes, an IPv4 address in the first 4.
    packed = attrs[_T[name]]
    if family == socket.AF_INET:
        return ipaddress.IPv4Address(packed[:4])
    return ipaddress.IPv6Address(packed[:16])


def _nested(payload: bytes) -> Attributes:
    return dict(attributes(payload))


NO_TRAFFIC = TrafficStats()


def _traffic(attrs: Attributes, prefix: str) -> TrafficStats:
    """The 64-bit counters where the kernel sends them, else the 32-bit ones."""
    payload = attrs.get(_T[f"{prefix}STATS64"]) or attrs.get(_T[f"{prefix}STATS"])
    if payload is None:
        return NO_TRAFFIC
    stats = _nested(payload)
    return TrafficStats(**{field: _number(stats, name) for field, name in _STATS_FIELDS})


def _reply(message: bytes, kind: str) -> Attributes:
    """The nested service or destination attributes of one dumped message."""
    top = _nested(message[NLMSG_HEADER.size + GENL_HEADER.size :])
    return _nested(top[_T[kind]])


def decode_timeouts(message: bytes) -> IPVSTimeouts:
    """The timeouts of the kernel's answer to IPVS_CMD_GET_CONFIG."""
    found = _nested(message[NLMSG_HEADER.size + GENL_HEADER.size :])
    return IPVSTimeouts(
        tcp=_number(found, "IPVS_CMD_ATTR_TIMEOUT_TCP"),
        tcp_fin=_number(found, "IPVS_CMD_ATTR_TIMEOUT_TCP_FIN"),
        udp=_number(found, "IPVS_CMD_ATTR_TIMEOUT_UDP"),
    )


def _virtual_server(attrs: Attributes) -> VirtualServer | None:
    """None for what we do not manage (firewall-mark services)."""
    if _number(attrs, "IPVS_SVC_ATTR_FWMARK"):
        return None
    flags, _ = struct.unpack_from("=II", attrs[_T["IPVS_SVC_ATTR_FLAGS"]])
    key = VirtualServerKey(
        protocol=PROTOCOLS_BY_NUMBER[_number(attrs, "IPVS_SVC_ATTR_PROTOCOL")],
        address=_address(attrs, "IPVS_SVC_ATTR_ADDR", _number(attrs, "IPVS_SVC_ATTR_AF")),
        port=_port(attrs, "IPVS_SVC_ATTR_PORT"),
    )
    return VirtualServer(
        key=key,
        scheduler=attrs[_T["IPVS_SVC_ATTR_SCHED_NAME"]].rstrip(b"\0").decode(),
        flags=ServiceFlags(flags & WRITABLE_FLAGS),
        timeout=_number(attrs, "IPVS_SVC_ATTR_TIMEOUT"),
    )


def _real_server_state(attrs: Attributes, family: int, traffic: bool = True) -> RealServerState:
    """``family``: the virtual server's, for kernels that do not send the destination's."""
    family = _number(attrs, "IPVS_DEST_ATTR_ADDR_FAMILY") or family
    server = RealServer(
        key=RealServerKey(
            address=_address(attrs, "IPVS_DEST_ATTR_ADDR", family),
            port=_port(attrs, "IPVS_DEST_ATTR_PORT"),
        ),
        weight=_number(attrs, "IPVS_DEST_ATTR_WEIGHT"),
        forward=ForwardMethod(_number(attrs, "IPVS_DEST_ATTR_FWD_METHOD") & 0x7),
        upper_threshold=_number(attrs, "IPVS_DEST_ATTR_U_THRESH"),
        lower_threshold=_number(attrs, "IPVS_DEST_ATTR_L_THRESH"),
    )
    return RealServerState(
        server=server,
        active_connections=_number(attrs, "IPVS_DEST_ATTR_ACTIVE_CONNS"),
        inactive_connections=_number(attrs, "IPVS_DEST_ATTR_INACT_CONNS"),
        persistent_connections=_number(attrs, "IPVS_DEST_ATTR_PERSIST_CONNS"),
        stats=_traffic(attrs, "IPVS_DEST_ATTR_") if traffic else NO_TRAFFIC,
    )


class NetlinkIPVS:
    """The kernel's IPVS table through the "IPVS" generic netlink family."""

    def __init__(self, batch_size: int = BATCH_SIZE) -> None:
        """IPVSUnavailable when the kernel has no IPVS family and cannot load ip_vs."""
        self._socket = BatchSocket(NETLINK_GENERIC, batch_size)
        try:
            self._family_id = generic_family_id(self._socket, abi.GENL_NAME)
        except OSError as error:
            self._socket.close()
            raise IPVSUnavailable(error.strerror or str(error)) from None

    def close(self) -> None:
        self._socket.close()

    def __enter__(self) -> NetlinkIPVS:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def apply(self, ops: Sequence[IPVSOp]) -> BatchResult:
        return self._socket.apply((self._family_id, *encode_op(op)) for op in ops)

    def _dump(self, command: int, attrs: list[tuple[str, Any]]) -> list[bytes]:
        return self._socket.request(self._family_id, NLM_F_DUMP, genl_body(command, attrs))

    def timeouts(self) -> IPVSTimeouts:
        (reply,) = self._socket.request(self._family_id, 0, genl_body(abi.IPVS_CMD_GET_CONFIG, []))
        return decode_timeouts(reply)

    def set_timeouts(self, timeouts: IPVSTimeouts) -> None:
        self._socket.request(self._family_id, 0, encode_timeouts(timeouts))

    def dump(self, *, real_servers: bool = True, traffic: bool = True) -> IPVSTable:
        """Every virtual server, then the destinations of each, one dump request apiece.

        The kernel dumps destinations only of a service named in the request, and a netlink
        socket runs one dump at a time (a second in the same sendmsg is refused with EBUSY),
        so these requests cannot be batched as writes are; without ``real_servers`` there
        is only the first.
        """
        if not real_servers:
            return {listed.server.key: listed for listed in self.listed()}
        return {
            listed.server.key: VirtualServerState(
                listed.server, self._real_servers(listed.server.key, traffic=traffic), listed.stats
            )
            for listed in self.listed()
        }

    def listed(self) -> Iterator[VirtualServerState]:
        """One dump request; each reply decoded as the iteration reaches it."""
        for message in self._dump(abi.IPVS_CMD_GET_SERVICE, []):
            state = self._state(_reply(message, "IPVS_CMD_ATTR_SERVICE"), real_servers=False)
            if state is not None:
                yield state

    def virtual_server(self, key: VirtualServerKey) -> VirtualServerState | None:
        """One GET_SERVICE for the service, one GET_DEST dump for its destinations."""
        attrs = self._service(key)
        return None if attrs is None else self._state(attrs)

    def with_real_servers(
        self, listed: VirtualServerState, *, traffic: bool = True
    ) -> VirtualServerState | None:
        """One GET_DEST dump; a GET_SERVICE only when it is empty, since the kernel dumps no
        destinations, and no error, for a service it no longer has."""
        found = self._real_servers(listed.server.key, traffic=traffic)
        if not found and self._service(listed.server.key) is None:
            return None
        return VirtualServerState(listed.server, found, listed.stats)

    def _service(self, key: VirtualServerKey) -> Attributes | None:
        """The service's attributes from one GET_SERVICE; None when the kernel has no such one."""
        body = genl_body(abi.IPVS_CMD_GET_SERVICE, _service_request(key))
        try:
            (message,) = self._socket.request(self._family_id, 0, body)
        except OSError as error:
            # ESRCH: no such service; ENOENT: the kernel's answer for some malformed keys.
            if error.errno in (errno.ESRCH, errno.ENOENT):
                return None
            raise
        return _reply(message, "IPVS_CMD_ATTR_SERVICE")

    def _state(
        self, attrs: Attributes, *, real_servers: bool = True, traffic: bool = True
    ) -> VirtualServerState | None:
        """A dumped or fetched service with its destinations; None for what we do not manage."""
        server = _virtual_server(attrs)
        if server is None:
            return None
        found = self._real_servers(server.key, traffic=traffic) if real_servers else {}
        return VirtualServerState(server, found, _traffic(attrs, "IPVS_SVC_ATTR_"))

    def _real_servers(
        self, key: VirtualServerKey, *, traffic: bool
    ) -> dict[RealServerKey, RealServerState]:
        family = _family(key.address)
        found = {}
        for dest in self._dump(abi.IPVS_CMD_GET_DEST, _service_request(key)):
            state = _real_server_state(_reply(dest, "IPVS_CMD_ATTR_DEST"), family, traffic)
            found[state.server.key] = state
        return found


class AbsentIPVS:
    """The IPVS of a kernel that has none and cannot load it: nothing to read or remove."""

    def dump(self, *, real_servers: bool = True, traffic: bool = True) -> IPVSTable:
        return {}

    def listed(self) -> Iterator[VirtualServerState]:
        return iter(())

    def virtual_server(self, key: VirtualServerKey) -> VirtualServerState | None:
        return None

    def with_real_servers(
        self, listed: VirtualServerState, *, traffic: bool = True
    ) -> VirtualServerState | None:
        return None

    def timeouts(self) -> IPVSTimeouts:
        return IPVSTimeouts()

    def set_timeouts(self, timeouts: IPVSTimeouts) -> None:
        raise OSError(errno.EPROTONOSUPPORT, "the kernel has no IPVS")

    def apply(self, ops: Sequence[IPVSOp]) -> BatchResult:
        return [refused(errno.EPROTONOSUPPORT) for _ in ops]
