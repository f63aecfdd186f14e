"""A netlink socket that sends many requests per ``sendmsg`` and matches every ack to its request.

The kernel processes the requests of one ``sendmsg`` in order and acks each; a refused request
gets its errno in its own ack while the others still apply. IPVS (generic netlink), ipsets and
conntrack (netfilter netlink) all go through this, with their own message encoding.
"""

from __future__ import annotations

import errno
import mmap
import os
import socket
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from itertools import islice

from pyroute2.netlink.exceptions import NetlinkError

from ipvsproxy.model import BatchResult, OpError

NETLINK_NETFILTER = 12
NETLINK_GENERIC = 16
NLM_F_REQUEST = 0x01
NLM_F_MULTI = 0x02
NLM_F_ACK = 0x04
NLM_F_EXCL = 0x200
NLM_F_CREATE = 0x400
NLM_F_DUMP = 0x300
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLA_F_NESTED = 1 << 15
NLA_F_NET_BYTEORDER = 1 << 14
NLA_TYPE_MASK = ~(NLA_F_NESTED | NLA_F_NET_BYTEORDER) & 0xFFFF
SOL_NETLINK = 270
NETLINK_CAP_ACK = 10
NLMSG_HEADER = struct.Struct("=IHHII")
NLA_HEADER = struct.Struct("=HH")
# Acks of one sendmsg queue on our socket until we read them; keep a batch well inside it.
BATCH_SIZE = 256
RECEIVE_BUFFER = 8 * 1024 * 1024
# The most one recv takes (a dump part or an ack is a few KB at most).
RECEIVE_SIZE = 1 << 20

GENL_ID_CTRL = 0x10
CTRL_CMD_GETFAMILY = 3
CTRL_ATTR_FAMILY_ID = 1
CTRL_ATTR_FAMILY_NAME = 2

# (message type, extra netlink flags, body after the netlink header)
Request = tuple[int, int, bytes]


def attribute(kind: int, payload: bytes) -> bytes:
    """One netlink attribute, padded to 4 bytes."""
    return (
        NLA_HEADER.pack(NLA_HEADER.size + len(payload), kind)
        + payload
        + b"\0" * (-len(payload) % 4)
    )


def attributes(data: bytes, offset: int = 0) -> Iterator[tuple[int, bytes]]:
    """(type without the nested/byte-order flags, payload) of each attribute in ``data``."""
    while offset + NLA_HEADER.size <= len(data):
        length, kind = NLA_HEADER.unpack_from(data, offset)
        if length < NLA_HEADER.size:
            return
        yield kind & NLA_TYPE_MASK, data[offset + NLA_HEADER.size : offset + length]
        offset += (length + 3) & ~3


@contextmanager
def refusals_as_os_errors() -> Iterator[None]:
    """Raise pyroute2's NetlinkError as the OSError every kernel interface refuses with."""
    try:
        yield
    except NetlinkError as error:
        raise OSError(error.code, os.strerror(error.code)) from error


def _error_code(message: bytes) -> int:
    """The positive errno an NLMSG_ERROR message carries (0 for an ack)."""
    (code,) = struct.unpack_from("=i", message, NLMSG_HEADER.size)
    return int(-code)


class BatchSocket:
    """A bound netlink socket of one protocol; requests are batched, acks mapped back."""

    def __init__(
        self,
        protocol: int,
        batch_size: int = BATCH_SIZE,
        describe: Callable[[int], str] = os.strerror,
    ) -> None:
        self._batch_size = batch_size
        self._describe = describe
        self._socket = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, protocol)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
        # Error acks then carry only the failed request's header, not its whole body.
        self._socket.setsockopt(SOL_NETLINK, NETLINK_CAP_ACK, 1)
        self._socket.bind((0, 0))
        self._sequence = 0
        # One buffer for every recv: ``recv(RECEIVE_SIZE)`` allocated 1 MB each time, which the
        # daemon's fixed mmap threshold (daemon/heap.py) made an mmap, a page fault, an mremap
        # and a munmap per ack; a first sync at 10,000 services takes 121,000 acks. An
        # anonymous mapping, not a bytearray: a bytearray's 1 MB is zeroed at once, 256 page
        # faults per socket (about 30 ms in the lab), where a mapping's pages come as a recv
        # first writes them, and an ack or a dump's reply touches the first few.
        self._mapping = mmap.mmap(-1, RECEIVE_SIZE)
        self._received = memoryview(self._mapping)

    def close(self) -> None:
        self._socket.close()
        self._received.release()
        self._mapping.close()

    def _encode(self, kind: int, flags: int, body: bytes) -> tuple[int, bytes]:
        self._sequence = (self._sequence + 1) & 0xFFFFFFFF
        header = NLMSG_HEADER.pack(NLMSG_HEADER.size + len(body), kind, flags, self._sequence, 0)
        return self._sequence, header + body

    def _messages(self) -> Iterator[tuple[int, int, int, bytes]]:
        """(type, flags, sequence, whole message) for each message of one recv."""
        data = bytes(self._received[: self._socket.recv_into(self._received)])
        offset = 0
        while offset + NLMSG_HEADER.size <= len(data):
            length, kind, flags, sequence, _ = NLMSG_HEADER.unpack_from(data, offset)
            yield kind, flags, sequence, data[offset : offset + length]
            offset += (length + 3) & ~3

    def apply(self, requests: Iterable[Request]) -> BatchResult:
        """Send every request with an ack asked for; one result per request, in order.
        Taken one batch at a time: a first sync's 121,000 encoded requests held at once
        were tens of MB."""
        results: BatchResult = []
        pending = iter(requests)
        while batch := list(islice(pending, self._batch_size)):
            results.extend(self._apply_batch(batch))
        return results

    def _apply_batch(self, requests: Sequence[Request]) -> BatchResult:
        index_by_sequence: dict[int, int] = {}
        chunks: list[bytes] = []
        for index, (kind, flags, body) in enumerate(requests):
            sequence, data = self._encode(kind, NLM_F_REQUEST | NLM_F_ACK | flags, body)
            index_by_sequence[sequence] = index
            chunks.append(data)
        self._socket.sendall(b"".join(chunks))
        results: BatchResult = [None] * len(requests)
        pending = set(index_by_sequence)
        while pending:
            for kind, _, sequence, data in self._messages():
                if kind != NLMSG_ERROR or sequence not in pending:
                    continue
                pending.discard(sequence)
                code = _error_code(data)
                if code:
                    results[index_by_sequence[sequence]] = OpError(code, self._describe(code))
        return results

    def request(self, kind: int, flags: int, body: bytes) -> list[bytes]:
        """Send one request and return its replies (whole messages); OSError if refused.

        A dump ends with NLMSG_DONE; any other request is sent asking for an ack, which ends it.
        """
        dump = flags & NLM_F_DUMP == NLM_F_DUMP
        sequence, data = self._encode(
            kind, NLM_F_REQUEST | flags | (0 if dump else NLM_F_ACK), body
        )
        self._socket.sendall(data)
        replies: list[bytes] = []
        while True:
            for reply_kind, _, reply_sequence, message in self._messages():
                if reply_sequence != sequence:
                    continue
                if reply_kind == NLMSG_DONE:
                    return replies
                if reply_kind == NLMSG_ERROR:
                    code = _error_code(message)
                    if code:
                        raise OSError(code, self._describe(code))
                    return replies
                replies.append(message)


def generic_family_id(sock: BatchSocket, name: str) -> int:
    """The id of the generic netlink family ``name``; OSError (ENOENT) if the kernel has none.

    Asking is what makes the kernel load the family's module when one provides it (the
    "net-pf-16-proto-16-family-NAME" module alias), as it does for IPVS and ip_vs.
    """
    body = struct.pack("=BBH", CTRL_CMD_GETFAMILY, 1, 0) + attribute(
        CTRL_ATTR_FAMILY_NAME, name.encode() + b"\0"
    )
    for reply in sock.request(GENL_ID_CTRL, 0, body):
        for kind, payload in attributes(reply, NLMSG_HEADER.size + 4):
            if kind == CTRL_ATTR_FAMILY_ID:
                return int(struct.unpack_from("=H", payload)[0])
    raise OSError(errno.ENOENT, f"no generic netlink family {name}")
