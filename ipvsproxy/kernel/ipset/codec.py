"""The ipset netlink protocol (what ipset(8) speaks): attributes in, entries out.

Attribute numbers come from pyroute2's ipset message classes; requests are encoded here by
hand, as for IPVS, so thousands of entries cost little to encode.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from collections.abc import Iterable, Iterator

from pyroute2.netlink.nfnetlink import ipset as nfipset

from ipvsproxy.kernel.ipset.entries import Entry
from ipvsproxy.kernel.netlink import (
    NLA_F_NESTED,
    NLA_F_NET_BYTEORDER,
    NLMSG_HEADER,
    attribute,
    attributes,
)
from ipvsproxy.model import IP_PROTOCOL_NUMBERS, IPFamily, IPSetContent, IPSetSpec

# kube-proxy's defaults (pkg/proxy/ipvs/ipset): every hash set, and the bitmap:port range.
HASH_SIZE = 1024
MAX_ELEMENTS = 65536
PORT_RANGE = (0, 65535)
IPSET_PROTOCOL = 7
NFNETLINK_V0 = 0
NFGEN_HEADER_SIZE = 4
NFPROTO_UNSPEC, NFPROTO_IPV4, NFPROTO_IPV6 = 0, 2, 10
NFPROTO_BY_FAMILY = {IPFamily.IPV4: NFPROTO_IPV4, IPFamily.IPV6: NFPROTO_IPV6}
# ipset(8) names protocols in lower case.
IP_PROTOCOLS = {protocol.lower(): number for protocol, number in IP_PROTOCOL_NUMBERS.items()}
PROTOCOL_NAMES = {
    **{number: name for name, number in IP_PROTOCOLS.items()},
    socket.IPPROTO_ICMP: "icmp",
    socket.IPPROTO_ICMPV6: "icmpv6",
}


def _attribute_numbers() -> dict[str, int]:
    """Attribute name -> number, as pyroute2's ipset message classes define them."""
    message = nfipset.ipset_msg
    numbers = {entry[0]: index for index, entry in enumerate(message.nla_map)}
    for nested in (message.ipset_generic.adt_data, message.cadt_data, nfipset.ipset_base.ipset_ip):
        for index, entry in enumerate(nested.nla_map):
            if isinstance(entry[0], int):
                numbers.setdefault(entry[1], entry[0])
            else:
                numbers.setdefault(entry[0], index)
    return numbers


ATTR = _attribute_numbers()
# Swapping names the second set where other commands carry the type name.
ATTR_SETNAME2 = ATTR["IPSET_ATTR_TYPENAME"]


def u8(kind: str, value: int) -> bytes:
    return attribute(ATTR[kind], struct.pack("=B", value))


def be16(kind: str, value: int) -> bytes:
    return attribute(ATTR[kind] | NLA_F_NET_BYTEORDER, struct.pack(">H", value))


def be32(kind: str, value: int) -> bytes:
    return attribute(ATTR[kind] | NLA_F_NET_BYTEORDER, struct.pack(">I", value))


def string(kind: int, value: str) -> bytes:
    return attribute(kind, value.encode() + b"\0")


def nested(kind: str, *children: bytes) -> bytes:
    return attribute(ATTR[kind] | NLA_F_NESTED, b"".join(children))


def ip_attribute(kind: str, address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bytes:
    inner = "IPSET_ATTR_IPADDR_IPV4" if address.version == 4 else "IPSET_ATTR_IPADDR_IPV6"
    return nested(kind, attribute(ATTR[inner] | NLA_F_NET_BYTEORDER, address.packed))


def entry_data(entry: Entry) -> bytes:
    parts = []
    if entry.address is not None:
        parts.append(ip_attribute("IPSET_ATTR_IP", entry.address))
    if entry.port is not None:
        parts.append(be16("IPSET_ATTR_PORT", entry.port))
    if entry.protocol is not None:
        parts.append(u8("IPSET_ATTR_PROTO", IP_PROTOCOLS[entry.protocol]))
    if entry.address2 is not None:
        parts.append(ip_attribute("IPSET_ATTR_IP2", entry.address2))
    if entry.prefix2 is not None:
        parts.append(u8("IPSET_ATTR_CIDR2", entry.prefix2))
    return nested("IPSET_ATTR_DATA", *parts)


def _format_ip(payload: bytes, prefix: int | None) -> str:
    (_, value), *_ = attributes(payload)
    address = ipaddress.ip_address(value)
    return str(address) if prefix in (None, address.max_prefixlen) else f"{address}/{prefix}"


def format_entry(data: bytes) -> str:
    """An entry the kernel listed, in ipset(8) syntax."""
    fields = dict(attributes(data))
    cidr = fields.get(ATTR["IPSET_ATTR_CIDR"])
    cidr2 = fields.get(ATTR["IPSET_ATTR_CIDR2"])
    parts = []
    if ATTR["IPSET_ATTR_IP"] in fields:
        parts.append(_format_ip(fields[ATTR["IPSET_ATTR_IP"]], cidr[0] if cidr else None))
    if ATTR["IPSET_ATTR_PORT"] in fields:
        (port,) = struct.unpack(">H", fields[ATTR["IPSET_ATTR_PORT"]])
        protocol = fields.get(ATTR["IPSET_ATTR_PROTO"])
        if protocol is None:
            parts.append(str(port))
        else:
            parts.append(f"{PROTOCOL_NAMES.get(protocol[0], str(protocol[0]))}:{port}")
    if ATTR["IPSET_ATTR_IP2"] in fields:
        parts.append(_format_ip(fields[ATTR["IPSET_ATTR_IP2"]], cidr2[0] if cidr2 else None))
    if ATTR["IPSET_ATTR_NAME"] in fields:
        parts.append(fields[ATTR["IPSET_ATTR_NAME"]].rstrip(b"\0").decode())
    return ",".join(parts)


def request_body(name: str | None, *attrs: bytes) -> bytes:
    """The nfnetlink header, protocol version and set name every ipset request starts with."""
    header = struct.pack("=BBH", NFPROTO_UNSPEC, NFNETLINK_V0, 0)
    setname = b"" if name is None else string(ATTR["IPSET_ATTR_SETNAME"], name)
    return header + u8("IPSET_ATTR_PROTOCOL", IPSET_PROTOCOL) + setname + b"".join(attrs)


def reply_attributes(message: bytes) -> dict[int, bytes]:
    """The top-level attributes of a reply, after its netlink and nfnetlink headers."""
    return dict(attributes(message, NLMSG_HEADER.size + NFGEN_HEADER_SIZE))


def decode_text(payload: bytes) -> str:
    return payload.rstrip(b"\0").decode()


# The extensions a set may be created with (IPSET_ATTR_CADT_FLAGS), as ipset(8) names them.
EXTENSION_FLAGS = (
    (nfipset.IPSET_FLAG_WITH_COUNTERS, "counters"),
    (nfipset.IPSET_FLAG_WITH_COMMENT, "comment"),
    (nfipset.IPSET_FLAG_WITH_FORCEADD, "forceadd"),
    (nfipset.IPSET_FLAG_WITH_SKBINFO, "skbinfo"),
)


def _u32(payload: bytes) -> int:
    (value,) = struct.unpack(">I", payload[:4])
    return int(value)


def _u16(payload: bytes) -> int:
    (value,) = struct.unpack(">H", payload[:2])
    return int(value)


def header_options(data: bytes) -> tuple[str, ...]:
    """The creation options a listed set's header shows beyond kube-proxy's own, as ipset(8)
    prints them. The hash size is left out: the kernel grows it as the set fills."""
    found = dict(attributes(data))
    options: list[str] = []
    maxelem = found.get(ATTR["IPSET_ATTR_MAXELEM"])
    if maxelem is not None and _u32(maxelem) != MAX_ELEMENTS:
        options.append(f"maxelem {_u32(maxelem)}")
    start, end = found.get(ATTR["IPSET_ATTR_PORT"]), found.get(ATTR["IPSET_ATTR_PORT_TO"])
    if start is not None and end is not None and (_u16(start), _u16(end)) != PORT_RANGE:
        options.append(f"range {_u16(start)}-{_u16(end)}")
    netmask = found.get(ATTR["IPSET_ATTR_NETMASK"])
    if netmask is not None:
        options.append(f"netmask {netmask[0]}")
    timeout = found.get(ATTR["IPSET_ATTR_TIMEOUT"])
    if timeout is not None:
        options.append(f"timeout {_u32(timeout)}")
    flags = found.get(ATTR["IPSET_ATTR_CADT_FLAGS"])
    if flags is not None:
        options += [name for flag, name in EXTENSION_FLAGS if _u32(flags) & flag]
    return tuple(options)


def reply_spec(fields: dict[int, bytes]) -> IPSetSpec:
    """A set's name, type and family from a reply that carries its header, and its options
    where the reply has them (a list's header does, the header command's does not)."""
    nfproto = fields[ATTR["IPSET_ATTR_FAMILY"]][0]
    data = fields.get(ATTR["IPSET_ATTR_DATA"])
    return IPSetSpec(
        decode_text(fields[ATTR["IPSET_ATTR_SETNAME"]]),
        decode_text(fields[ATTR["IPSET_ATTR_TYPENAME"]]),
        IPFamily.IPV6 if nfproto == NFPROTO_IPV6 else IPFamily.IPV4,
        options=header_options(data) if data is not None else (),
    )


def decode_parts(messages: Iterable[bytes]) -> Iterator[IPSetContent]:
    """The sets of the kernel's answer to IPSET_CMD_LIST, a part per message, each decoded as
    the iteration reaches it: a large set comes in several messages, in a row, and only the
    first names its type and family."""
    specs: dict[str, IPSetSpec] = {}
    for message in messages:
        fields = reply_attributes(message)
        name = decode_text(fields[ATTR["IPSET_ATTR_SETNAME"]])
        if ATTR["IPSET_ATTR_TYPENAME"] in fields:
            specs[name] = reply_spec(fields)
        spec = specs.get(name)
        if spec is None:
            continue
        members = attributes(fields.get(ATTR["IPSET_ATTR_ADT"], b""))
        yield IPSetContent(spec, frozenset(format_entry(data) for _, data in members))


def nfproto(spec: IPSetSpec) -> int:
    return NFPROTO_UNSPEC if spec.set_type == "bitmap:port" else NFPROTO_BY_FAMILY[spec.family]


def create_body(spec: IPSetSpec, revision: int) -> bytes:
    """What ``ipset create`` sends for ``spec``, at the type's ``revision``."""
    return request_body(
        spec.name,
        string(ATTR["IPSET_ATTR_TYPENAME"], spec.set_type),
        u8("IPSET_ATTR_REVISION", revision),
        u8("IPSET_ATTR_FAMILY", nfproto(spec)),
        create_data(spec.set_type),
    )


def swap_body(name: str, other: str) -> bytes:
    """What ``ipset swap NAME OTHER`` sends."""
    return request_body(name, string(ATTR_SETNAME2, other))


def create_data(set_type: str) -> bytes:
    """The creation options kube-proxy gives a set of this type."""
    if set_type == "bitmap:port":
        return nested(
            "IPSET_ATTR_DATA",
            be16("IPSET_ATTR_PORT", PORT_RANGE[0]),
            be16("IPSET_ATTR_PORT_TO", PORT_RANGE[1]),
        )
    return nested(
        "IPSET_ATTR_DATA",
        be32("IPSET_ATTR_HASHSIZE", HASH_SIZE),
        be32("IPSET_ATTR_MAXELEM", MAX_ELEMENTS),
    )
