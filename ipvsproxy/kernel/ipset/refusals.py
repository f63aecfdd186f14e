"""What both the netlink sets and the fake refuse, and in the kernel's words."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable, Sequence

from pyroute2.netlink.nfnetlink import ipset as nfipset

from ipvsproxy.kernel.errors import EntryError, IPSetError
from ipvsproxy.kernel.ipset.entries import Entry, check_spec, parse_entry
from ipvsproxy.kernel.protocols import as_listed
from ipvsproxy.model import BatchResult, IPSetSpec, OpError

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


def parse_all(spec: IPSetSpec, entries: Iterable[str]) -> list[Entry | OpError]:
    parsed: list[Entry | OpError] = []
    for text in entries:
        try:
            parsed.append(parse_entry(text, spec.set_type, spec.family))
        except EntryError as error:
            parsed.append(OpError(errno.EINVAL, f"set {spec.name}: {error}"))
    return parsed


def checked(spec: IPSetSpec) -> None:
    try:
        check_spec(spec)
    except EntryError as error:
        raise IPSetError(errno.EINVAL, str(error)) from None


def refused_entries(spec: IPSetSpec, entries: Sequence[str], results: BatchResult) -> None:
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


def exists_differently(spec: IPSetSpec) -> IPSetError:
    wanted = as_listed(spec)
    return IPSetError(
        errno.EEXIST,
        f"set {spec.name} already exists with another type than {wanted.set_type} "
        f"{wanted.family}; destroy it first",
    )


def busy(name: str) -> IPSetError:
    return IPSetError(
        nfipset.IPSET_ERR_BUSY,
        f"cannot destroy set {name}: {error_message(nfipset.IPSET_ERR_BUSY)}",
    )
