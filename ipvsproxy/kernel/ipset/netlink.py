"""ipsets: the kernel's through netfilter netlink (the fake, with the same rules, is
``kernel.testing.FakeIPSets``).

Sets are created as kube-proxy creates them (hash types with ``hashsize 1024 maxelem 65536``,
bitmap:port over ``0-65535``). Creating a set that already exists with the same type is not an
error; adding an entry that is there or deleting one that is not is not an error either
(``ipset -exist``), so a sync can repeat itself.
"""

from __future__ import annotations

import errno
import zlib
from collections.abc import Iterator, Mapping, Sequence

from pyroute2.netlink.nfnetlink import NFNL_SUBSYS_IPSET
from pyroute2.netlink.nfnetlink import ipset as nfipset

from ipvsproxy.kernel.errors import IPSetError
from ipvsproxy.kernel.ipset.codec import (
    ATTR,
    create_body,
    decode_parts,
    entry_data,
    nfproto,
    reply_attributes,
    reply_spec,
    request_body,
    string,
    swap_body,
    u8,
)
from ipvsproxy.kernel.ipset.entries import SET_TYPES, same_kind
from ipvsproxy.kernel.ipset.refusals import (
    busy,
    checked,
    error_message,
    exists_differently,
    parse_all,
    refused_entries,
)
from ipvsproxy.kernel.netlink import (
    BATCH_SIZE,
    NETLINK_NETFILTER,
    NLM_F_DUMP,
    BatchSocket,
)
from ipvsproxy.kernel.protocols import merged_sets
from ipvsproxy.model import BatchResult, IPSetContent, IPSetSpec, OpError


def _temporary_name(name: str) -> str:
    return f"ipvsproxy-tmp-{zlib.crc32(name.encode()):08x}"


def _failed(action: str, error: OSError) -> IPSetError:
    return IPSetError(error.errno or errno.EIO, f"{action}: {error.strerror}")


class NetlinkIPSets:
    """The kernel's ipsets through netfilter netlink (the ipset(8) protocol), entries batched."""

    def __init__(self, batch_size: int = BATCH_SIZE) -> None:
        self._socket = BatchSocket(NETLINK_NETFILTER, batch_size, error_message)
        self._revisions: dict[tuple[str, int], int] = {}

    def close(self) -> None:
        self._socket.close()

    def __enter__(self) -> NetlinkIPSets:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _request(self, command: int, body: bytes, flags: int = 0) -> list[bytes]:
        return self._socket.request((NFNL_SUBSYS_IPSET << 8) | command, flags, body)

    def list_sets(self) -> Mapping[str, IPSetContent]:
        return merged_sets(self.listed())

    def listed(self) -> Iterator[IPSetContent]:
        yield from decode_parts(
            self._request(nfipset.IPSET_CMD_LIST, request_body(None), NLM_F_DUMP)
        )

    def _spec(self, name: str) -> IPSetSpec | None:
        """The type and family of one set, from its header alone."""
        try:
            (reply,) = self._request(nfipset.IPSET_CMD_HEADER, request_body(name))
        except OSError as error:
            if error.errno == errno.ENOENT:
                return None
            raise _failed(f"read set {name}", error) from None
        return reply_spec(reply_attributes(reply))

    def _revision(self, set_type: str, family: int) -> int:
        """The newest revision of a set type the kernel has (asking also loads its module)."""
        key = (set_type, family)
        if key not in self._revisions:
            body = request_body(
                None,
                string(ATTR["IPSET_ATTR_TYPENAME"], set_type),
                u8("IPSET_ATTR_FAMILY", family),
            )
            try:
                (reply,) = self._request(nfipset.IPSET_CMD_TYPE, body)
            except OSError as error:
                raise _failed(f"set type {set_type}", error) from None
            self._revisions[key] = reply_attributes(reply)[ATTR["IPSET_ATTR_REVISION"]][0]
        return self._revisions[key]

    def create(self, spec: IPSetSpec) -> None:
        checked(spec)
        # The kernel's own check of an existing set ignores its family: compare it ourselves.
        existing = self._spec(spec.name)
        if existing is not None:
            if not same_kind(existing, spec):
                raise exists_differently(spec)
            return
        body = create_body(spec, self._revision(spec.set_type, nfproto(spec)))
        try:
            self._request(nfipset.IPSET_CMD_CREATE, body)
        except OSError as error:
            if error.errno == errno.EEXIST:
                raise exists_differently(spec) from None
            raise _failed(f"create set {spec.name}", error) from None

    def destroy(self, name: str) -> None:
        if not name:
            # An empty name would ask the kernel to destroy every set.
            raise IPSetError(errno.EINVAL, "destroy: no set name given")
        try:
            self._request(nfipset.IPSET_CMD_DESTROY, request_body(name))
        except OSError as error:
            if error.errno == errno.ENOENT:
                return
            if error.errno == nfipset.IPSET_ERR_BUSY:
                raise busy(name) from None
            raise _failed(f"destroy set {name}", error) from None

    def add(self, name: str, entries: Sequence[str]) -> BatchResult:
        return self._change(nfipset.IPSET_CMD_ADD, name, entries)

    def delete(self, name: str, entries: Sequence[str]) -> BatchResult:
        return self._change(nfipset.IPSET_CMD_DEL, name, entries)

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
        for index, entry in enumerate(parse_all(spec, entries)):
            if isinstance(entry, OpError):
                results[index] = entry
                continue
            body = request_body(name, entry_data(entry))
            requests.append(((NFNL_SUBSYS_IPSET << 8) | command, 0, body))
            sent.append(index)
        for index, refused in zip(sent, self._socket.apply(requests), strict=True):
            if refused is not None:
                message = f"set {name}: {entries[index]!r}: {refused.message}"
                results[index] = OpError(refused.errno, message)
        return results

    def replace(self, content: IPSetContent) -> None:
        spec = content.spec
        entries = sorted(content.entries)
        parsed = parse_all(spec, entries)
        refused_entries(spec, entries, [e if isinstance(e, OpError) else None for e in parsed])
        self.create(spec)
        temporary = IPSetSpec(_temporary_name(spec.name), spec.set_type, spec.family)
        self.destroy(temporary.name)
        self.create(temporary)
        try:
            refused_entries(spec, entries, self.add(temporary.name, entries))
            try:
                self._request(nfipset.IPSET_CMD_SWAP, swap_body(spec.name, temporary.name))
            except OSError as error:
                raise _failed(f"replace set {spec.name}", error) from None
        finally:
            self.destroy(temporary.name)
