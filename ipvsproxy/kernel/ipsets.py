"""ipsets: the kernel's through netfilter netlink, and an in-memory fake.

Sets are created as kube-proxy creates them (hash types with ``hashsize 1024 maxelem 65536``,
bitmap:port over ``0-65535``). Creating a set that already exists with the same type is not an
error; adding an entry that is there or deleting one that is not is not an error either
(``ipset -exist``), so a sync can repeat itself.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import struct
import zlib
from collections.abc import Iterable, Mapping, Sequence

from pyroute2.netlink.nfnetlink import NFNL_SUBSYS_IPSET
from pyroute2.netlink.nfnetlink import ipset as nfipset

from ipvsproxy.kernel.ipset_entries import (
    SET_TYPES,
    Entry,
    EntryError,
    check_spec,
    parse_entry,
)
from ipvsproxy.kernel.netlink import (
    NETLINK_NETFILTER,
    NLA_F_NESTED,
    NLA_F_NET_BYTEORDER,
    NLM_F_DUMP,
    BatchSocket,
    attribute,
    attributes,
)
from ipvsproxy.model import BatchResult, IPFamily, IPSetContent, IPSetSpec, OpError

# The kernel's own ipset errnos (include/uapi/linux/netfilter/ipset/ip_set.h), which
# os.strerror does not know.
IPSET_MESSAGES = {
    nfipset.IPSET_ERR_PROTOCOL: "kernel and userspace ipset protocols differ",
    nfipset.IPSET_ERR_FIND_TYPE: "the kernel has no such set type (module not loaded?)",
    nfipset.IPSET_ERR_MAX_SETS: "the kernel's maximum number of sets is reached",
    nfipset.IPSET_ERR_BUSY: "the set is in use by a kernel component (an iptables rule?)",
    nfipset.IPSET_ERR_EXIST_SETNAME2: "the set to swap with does not exist",
    nfipset.IPSET_ERR_TYPE_MISMATCH: "the two sets' types differ",
    nfipset.IPSET_ERR_EXIST: "the element is already added or is missing",
    nfipset.IPSET_ERR_INVALID_CIDR: "invalid prefix length",
    nfipset.IPSET_ERR_INVALID_FAMILY: "the address family does not match the set's",
    nfipset.IPSET_ERR_REFERENCED: "the set is referenced by another set",
    nfipset.IPSET_ERR_IPADDR_IPV4: "an IPv4 address is expected",
    nfipset.IPSET_ERR_IPADDR_IPV6: "an IPv6 address is expected",
    nfipset.IPSET_ERR_TYPE_SPECIFIC: "the set is full (maxelem) or the entry is out of range",
}


def error_message(code: int) -> str:
    return IPSET_MESSAGES.get(code) or os.strerror(code)


class IPSetError(OSError):
    """An operation on a whole set failed; ``errno`` is the kernel's."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(code, message)


def as_listed(spec: IPSetSpec) -> IPSetSpec:
    """What listing the kernel tells of a set made from ``spec``.

    The kernel keeps no comment, and a bitmap:port set has no address family (it is reported
    as IPv4): compare a desired spec with a listed one through this.
    """
    family = IPFamily.IPV4 if spec.set_type == "bitmap:port" else spec.family
    return IPSetSpec(spec.name, spec.set_type, family)


def _parse_all(spec: IPSetSpec, entries: Iterable[str]) -> list[Entry | OpError]:
    parsed: list[Entry | OpError] = []
    for text in entries:
        try:
            parsed.append(parse_entry(text, spec.set_type, spec.family))
        except EntryError as error:
            parsed.append(OpError(errno.EINVAL, f"set {spec.name}: {error}"))
    return parsed


def _checked(spec: IPSetSpec) -> None:
    try:
        check_spec(spec)
    except EntryError as error:
        raise IPSetError(errno.EINVAL, str(error)) from None


def _refused_entries(spec: IPSetSpec, entries: Sequence[str], results: BatchResult) -> None:
    """Raise for the entries of a whole-set operation that were refused, if any."""
    refused = [
        f"{entry!r} ({result.message})"
        for entry, result in zip(entries, results, strict=True)
        if result is not None
    ]
    if refused:
        more = f" and {len(refused) - 5} more" if len(refused) > 5 else ""
        shown = ", ".join(refused[:5]) + more
        raise IPSetError(errno.EINVAL, f"set {spec.name} left as it was: refused {shown}")


class FakeIPSets:
    """In-memory sets that refuse what the kernel refuses, with the kernel's errnos.

    ``hold``/``release`` stand for an iptables rule that refers to a set.
    """

    def __init__(self) -> None:
        self._specs: dict[str, IPSetSpec] = {}
        self._entries: dict[str, set[str]] = {}
        self._held: set[str] = set()

    def list_sets(self) -> Mapping[str, IPSetContent]:
        return {
            name: IPSetContent(as_listed(spec), frozenset(self._entries[name]))
            for name, spec in self._specs.items()
        }

    def create(self, spec: IPSetSpec) -> None:
        _checked(spec)
        existing = self._specs.get(spec.name)
        if existing is None:
            self._specs[spec.name] = spec
            self._entries[spec.name] = set()
        elif as_listed(existing) != as_listed(spec):
            raise _exists_differently(spec)

    def destroy(self, name: str) -> None:
        if name in self._held:
            raise _busy(name)
        self._specs.pop(name, None)
        self._entries.pop(name, None)

    def add(self, name: str, entries: Sequence[str]) -> BatchResult:
        return self._change(name, entries, add=True)

    def delete(self, name: str, entries: Sequence[str]) -> BatchResult:
        return self._change(name, entries, add=False)

    def _change(self, name: str, entries: Sequence[str], add: bool) -> BatchResult:
        spec = self._specs.get(name)
        if spec is None:
            return [OpError(errno.ENOENT, f"set {name} does not exist") for _ in entries]
        results: BatchResult = []
        for entry in _parse_all(spec, entries):
            if isinstance(entry, OpError):
                results.append(entry)
                continue
            if add:
                self._entries[name].add(str(entry))
            else:
                self._entries[name].discard(str(entry))
            results.append(None)
        return results

    def replace(self, content: IPSetContent) -> None:
        self.create(content.spec)
        entries = sorted(content.entries)
        parsed = _parse_all(content.spec, entries)
        _refused_entries(
            content.spec, entries, [e if isinstance(e, OpError) else None for e in parsed]
        )
        self._entries[content.spec.name] = {str(entry) for entry in parsed}

    def hold(self, name: str) -> None:
        self._held.add(name)

    def release(self, name: str) -> None:
        self._held.discard(name)


def _exists_differently(spec: IPSetSpec) -> IPSetError:
    wanted = as_listed(spec)
    return IPSetError(
        errno.EEXIST,
        f"set {spec.name} already exists with another type than {wanted.set_type} "
        f"{wanted.family}; destroy it first",
    )


def _busy(name: str) -> IPSetError:
    return IPSetError(
        nfipset.IPSET_ERR_BUSY,
        f"cannot destroy set {name}: {error_message(nfipset.IPSET_ERR_BUSY)}",
    )


# kube-proxy's defaults (pkg/proxy/ipvs/ipset): every hash set, and the bitmap:port range.
HASH_SIZE = 1024
MAX_ELEMENTS = 65536
PORT_RANGE = (0, 65535)
IPSET_PROTOCOL = 7
NFNETLINK_V0 = 0
NFPROTO_UNSPEC, NFPROTO_IPV4, NFPROTO_IPV6 = 0, 2, 10
NFPROTO_BY_FAMILY = {IPFamily.IPV4: NFPROTO_IPV4, IPFamily.IPV6: NFPROTO_IPV6}
IP_PROTOCOLS = {"tcp": socket.IPPROTO_TCP, "udp": socket.IPPROTO_UDP, "sctp": socket.IPPROTO_SCTP}
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


def _u8(kind: str, value: int) -> bytes:
    return attribute(ATTR[kind], struct.pack("=B", value))


def _be16(kind: str, value: int) -> bytes:
    return attribute(ATTR[kind] | NLA_F_NET_BYTEORDER, struct.pack(">H", value))


def _be32(kind: str, value: int) -> bytes:
    return attribute(ATTR[kind] | NLA_F_NET_BYTEORDER, struct.pack(">I", value))


def _string(kind: int, value: str) -> bytes:
    return attribute(kind, value.encode() + b"\0")


def _nested(kind: str, *children: bytes) -> bytes:
    return attribute(ATTR[kind] | NLA_F_NESTED, b"".join(children))


def _ip(kind: str, address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bytes:
    inner = "IPSET_ATTR_IPADDR_IPV4" if address.version == 4 else "IPSET_ATTR_IPADDR_IPV6"
    return _nested(kind, attribute(ATTR[inner] | NLA_F_NET_BYTEORDER, address.packed))


def _entry_data(entry: Entry) -> bytes:
    parts = []
    if entry.address is not None:
        parts.append(_ip("IPSET_ATTR_IP", entry.address))
    if entry.port is not None:
        parts.append(_be16("IPSET_ATTR_PORT", entry.port))
    if entry.protocol is not None:
        parts.append(_u8("IPSET_ATTR_PROTO", IP_PROTOCOLS[entry.protocol]))
    if entry.address2 is not None:
        parts.append(_ip("IPSET_ATTR_IP2", entry.address2))
    if entry.prefix2 is not None:
        parts.append(_u8("IPSET_ATTR_CIDR2", entry.prefix2))
    return _nested("IPSET_ATTR_DATA", *parts)


def _format_ip(payload: bytes, prefix: int | None) -> str:
    (_, value), *_ = attributes(payload)
    address = ipaddress.ip_address(value)
    return str(address) if prefix in (None, address.max_prefixlen) else f"{address}/{prefix}"


def _format_entry(data: bytes) -> str:
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


def _temporary_name(name: str) -> str:
    return f"ipvsproxy-tmp-{zlib.crc32(name.encode()):08x}"


class NetlinkIPSets:
    """The kernel's ipsets through netfilter netlink (the ipset(8) protocol), entries batched."""

    def __init__(self) -> None:
        self._socket = BatchSocket(NETLINK_NETFILTER, describe=error_message)
        self._revisions: dict[tuple[str, int], int] = {}

    def close(self) -> None:
        self._socket.close()

    def __enter__(self) -> NetlinkIPSets:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _body(self, name: str | None, *attrs: bytes, family: int = NFPROTO_UNSPEC) -> bytes:
        header = struct.pack("=BBH", family, NFNETLINK_V0, 0) + _u8(
            "IPSET_ATTR_PROTOCOL", IPSET_PROTOCOL
        )
        setname = b"" if name is None else _string(ATTR["IPSET_ATTR_SETNAME"], name)
        return header + setname + b"".join(attrs)

    def _request(self, command: int, body: bytes, flags: int = 0) -> list[bytes]:
        return self._socket.request((NFNL_SUBSYS_IPSET << 8) | command, flags, body)

    def list_sets(self) -> Mapping[str, IPSetContent]:
        specs: dict[str, IPSetSpec] = {}
        entries: dict[str, set[str]] = {}
        # A large set comes in several messages; only the first names its type and family.
        for message in self._request(nfipset.IPSET_CMD_LIST, self._body(None), NLM_F_DUMP):
            fields = dict(attributes(message, 20))
            name = fields[ATTR["IPSET_ATTR_SETNAME"]].rstrip(b"\0").decode()
            if ATTR["IPSET_ATTR_TYPENAME"] in fields:
                set_type = fields[ATTR["IPSET_ATTR_TYPENAME"]].rstrip(b"\0").decode()
                nfproto = fields[ATTR["IPSET_ATTR_FAMILY"]][0]
                family = IPFamily.IPV6 if nfproto == NFPROTO_IPV6 else IPFamily.IPV4
                specs[name] = IPSetSpec(name, set_type, family)
            members = entries.setdefault(name, set())
            for _, data in attributes(fields.get(ATTR["IPSET_ATTR_ADT"], b"")):
                members.add(_format_entry(data))
        return {
            name: IPSetContent(spec, frozenset(entries.get(name, ())))
            for name, spec in specs.items()
        }

    def _nfproto(self, spec: IPSetSpec) -> int:
        return NFPROTO_UNSPEC if spec.set_type == "bitmap:port" else NFPROTO_BY_FAMILY[spec.family]

    def _revision(self, set_type: str, nfproto: int) -> int:
        """The newest revision of a set type the kernel has (this also loads its module)."""
        key = (set_type, nfproto)
        if key not in self._revisions:
            body = self._body(
                None,
                _string(ATTR["IPSET_ATTR_TYPENAME"], set_type),
                _u8("IPSET_ATTR_FAMILY", nfproto),
            )
            try:
                (reply,) = self._request(nfipset.IPSET_CMD_TYPE, body)
            except OSError as error:
                raise IPSetError(
                    error.errno or errno.EINVAL, f"set type {set_type}: {error.strerror}"
                ) from None
            fields = dict(attributes(reply, 20))
            self._revisions[key] = fields[ATTR["IPSET_ATTR_REVISION"]][0]
        return self._revisions[key]

    def create(self, spec: IPSetSpec) -> None:
        _checked(spec)
        # The kernel's own check of an existing set ignores its family: compare it ourselves.
        existing = self._spec(spec.name)
        if existing is not None:
            if as_listed(existing) != as_listed(spec):
                raise _exists_differently(spec)
            return
        nfproto = self._nfproto(spec)
        if spec.set_type == "bitmap:port":
            data = _nested(
                "IPSET_ATTR_DATA",
                _be16("IPSET_ATTR_PORT", PORT_RANGE[0]),
                _be16("IPSET_ATTR_PORT_TO", PORT_RANGE[1]),
            )
        else:
            data = _nested(
                "IPSET_ATTR_DATA",
                _be32("IPSET_ATTR_HASHSIZE", HASH_SIZE),
                _be32("IPSET_ATTR_MAXELEM", MAX_ELEMENTS),
            )
        body = self._body(
            spec.name,
            _string(ATTR["IPSET_ATTR_TYPENAME"], spec.set_type),
            _u8("IPSET_ATTR_REVISION", self._revision(spec.set_type, nfproto)),
            _u8("IPSET_ATTR_FAMILY", nfproto),
            data,
        )
        try:
            self._request(nfipset.IPSET_CMD_CREATE, body)
        except OSError as error:
            if error.errno == errno.EEXIST:
                raise _exists_differently(spec) from None
            raise IPSetError(
                error.errno or 0, f"create set {spec.name}: {error.strerror}"
            ) from None

    def destroy(self, name: str) -> None:
        if not name:
            # An empty name would ask the kernel to destroy every set.
            raise IPSetError(errno.EINVAL, "destroy: no set name given")
        try:
            self._request(nfipset.IPSET_CMD_DESTROY, self._body(name))
        except OSError as error:
            if error.errno == errno.ENOENT:
                return
            if error.errno == nfipset.IPSET_ERR_BUSY:
                raise _busy(name) from None
            raise IPSetError(error.errno or 0, f"destroy set {name}: {error.strerror}") from None

    def add(self, name: str, entries: Sequence[str]) -> BatchResult:
        return self._change(nfipset.IPSET_CMD_ADD, name, entries)

    def delete(self, name: str, entries: Sequence[str]) -> BatchResult:
        return self._change(nfipset.IPSET_CMD_DEL, name, entries)

    def _spec(self, name: str) -> IPSetSpec | None:
        """The type and family of one set, from its header alone."""
        try:
            (reply,) = self._request(nfipset.IPSET_CMD_HEADER, self._body(name))
        except OSError as error:
            if error.errno == errno.ENOENT:
                return None
            raise
        fields = dict(attributes(reply, 20))
        set_type = fields[ATTR["IPSET_ATTR_TYPENAME"]].rstrip(b"\0").decode()
        nfproto = fields[ATTR["IPSET_ATTR_FAMILY"]][0]
        return IPSetSpec(
            name, set_type, IPFamily.IPV6 if nfproto == NFPROTO_IPV6 else IPFamily.IPV4
        )

    def _change(self, command: int, name: str, entries: Sequence[str]) -> BatchResult:
        spec = self._spec(name)
        if spec is None:
            return [OpError(errno.ENOENT, f"set {name} does not exist") for _ in entries]
        if spec.set_type not in SET_TYPES:
            return [
                OpError(errno.EINVAL, f"set {name}: type {spec.set_type} is not one we write")
                for _ in entries
            ]
        results: BatchResult = [None] * len(entries)
        requests = []
        sent: list[int] = []
        for index, entry in enumerate(_parse_all(spec, entries)):
            if isinstance(entry, OpError):
                results[index] = entry
                continue
            requests.append(
                ((NFNL_SUBSYS_IPSET << 8) | command, 0, self._body(name, _entry_data(entry)))
            )
            sent.append(index)
        for index, refused in zip(sent, self._socket.apply(requests), strict=True):
            if refused is not None:
                message = f"set {name}: {entries[index]!r}: {refused.message}"
                results[index] = OpError(refused.errno, message)
        return results

    def replace(self, content: IPSetContent) -> None:
        spec = content.spec
        entries = sorted(content.entries)
        parsed = _parse_all(spec, entries)
        _refused_entries(spec, entries, [e if isinstance(e, OpError) else None for e in parsed])
        self.create(spec)
        temporary = IPSetSpec(_temporary_name(spec.name), spec.set_type, spec.family)
        self.destroy(temporary.name)
        self.create(temporary)
        try:
            _refused_entries(spec, entries, self.add(temporary.name, entries))
            body = self._body(spec.name, _string(ATTR_SETNAME2, temporary.name))
            try:
                self._request(nfipset.IPSET_CMD_SWAP, body)
            except OSError as error:
                raise IPSetError(
                    error.errno or 0, f"replace set {spec.name}: {error.strerror}"
                ) from None
        finally:
            self.destroy(temporary.name)
