"""Netlink attributes as (path of attribute types, payload) leaves, written apart from the
kernel layer's own parser so that the tests do not read our bytes with our own code."""

from __future__ import annotations

import struct
from collections.abc import Collection

NLA_F_NESTED = 1 << 15
NLA_HEADER = struct.Struct("=HH")
NLMSG_HEADER_SIZE = 16
# (attribute types from the outermost in, each with its byte-order flag), payload
Leaf = tuple[tuple[int, ...], bytes]


def leaves(
    data: bytes, nested: Collection[tuple[int, ...]] = (), path: tuple[int, ...] = ()
) -> list[Leaf]:
    """Every attribute that holds no others, in order. An attribute nests others when it is
    flagged so or its path is in ``nested`` (libnl sends IPVS's unflagged)."""
    found: list[Leaf] = []
    offset = 0
    while offset + NLA_HEADER.size <= len(data):
        length, kind = NLA_HEADER.unpack_from(data, offset)
        if length < NLA_HEADER.size:
            raise ValueError(f"attribute of length {length} at {offset}")
        payload = data[offset + NLA_HEADER.size : offset + length]
        here = (*path, kind & ~NLA_F_NESTED)
        if kind & NLA_F_NESTED or here in nested:
            found.extend(leaves(payload, nested, here))
        else:
            found.append((here, payload))
        offset += (length + 3) & ~3
    return found


def message_leaves(
    message: bytes, header: int, nested: Collection[tuple[int, ...]] = ()
) -> list[Leaf]:
    """The leaves of a whole netlink message whose fixed header is ``header`` bytes long."""
    return leaves(message[NLMSG_HEADER_SIZE + header :], nested)
