"""ipset(8) entry syntax for the set types kube-proxy's IPVS mode uses, both ways.

``parse_entry`` turns ``10.96.0.10,tcp:80`` into a typed ``Entry`` for a given set type and
family, refusing anything the kernel would read differently; ``str(entry)`` gives back the
exact text ``ipset list`` prints, so desired entries and entries read from the kernel compare
equal as strings.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, replace

from ipvsproxy.kernel.errors import EntryError
from ipvsproxy.kernel.protocols import as_listed
from ipvsproxy.model import IPAddress, IPFamily, IPNetwork, IPSetSpec

PROTOCOLS = ("tcp", "udp", "sctp")
# set type -> the parts of an entry, in order, separated by commas.
SET_TYPES: dict[str, tuple[str, ...]] = {
    "hash:ip": ("ip",),
    "hash:ip,port": ("ip", "port"),
    "hash:ip,port,ip": ("ip", "port", "ip2"),
    "hash:ip,port,net": ("ip", "port", "net"),
    "bitmap:port": ("bare_port",),
}
# The kernel's name length limit (IPSET_MAXNAMELEN) counts the terminating NUL.
MAX_NAME_LENGTH = 31


@dataclass(frozen=True, slots=True)
class Entry:
    """One member of a set; which fields are set depends on the set type."""

    address: IPAddress | None = None
    protocol: str | None = None
    port: int | None = None
    address2: IPAddress | None = None
    # The prefix length of ``address2`` in hash:ip,port,net; None for a plain second address.
    prefix2: int | None = None

    def __str__(self) -> str:
        parts = []
        if self.address is not None:
            parts.append(str(self.address))
        if self.protocol is not None:
            parts.append(f"{self.protocol}:{self.port}")
        elif self.port is not None:
            parts.append(str(self.port))
        if self.address2 is not None:
            full = self.address2.max_prefixlen
            prefix = "" if self.prefix2 in (None, full) else f"/{self.prefix2}"
            parts.append(f"{self.address2}{prefix}")
        return ",".join(parts)


def check_spec(spec: IPSetSpec) -> None:
    """Raise EntryError for a name or type this layer cannot create."""
    if not spec.name or len(spec.name) > MAX_NAME_LENGTH:
        raise EntryError(f"set name {spec.name!r} must be 1 to {MAX_NAME_LENGTH} characters")
    if spec.set_type not in SET_TYPES:
        raise EntryError(
            f"set {spec.name}: type {spec.set_type!r} is not one of {', '.join(SET_TYPES)}"
        )
    if spec.options:
        raise EntryError(
            f"set {spec.name}: sets are made only with kube-proxy's options, not "
            f"{' '.join(spec.options)}"
        )


def _address(text: str, family: IPFamily) -> IPAddress:
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        raise EntryError(f"{text!r} is not an IP address") from None
    if IPFamily.of(address) is not family:
        raise EntryError(f"{text} is not an {family} address")
    return address


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise EntryError(f"{text!r} is not a port number 0-65535")
    return int(text)


def _network(text: str, family: IPFamily) -> IPNetwork:
    try:
        network = ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise EntryError(f"{text!r} is not a network") from None
    if IPFamily.of(network) is not family:
        raise EntryError(f"{text} is not an {family} network")
    if network.prefixlen == 0:
        raise EntryError(f"{text}: the kernel refuses a zero prefix length")
    return network


def parse_entry(text: str, set_type: str, family: IPFamily) -> Entry:
    """The entry ``text`` means in a set of ``set_type`` and ``family``; EntryError if none."""
    kinds = SET_TYPES.get(set_type)
    if kinds is None:
        raise EntryError(f"unsupported set type {set_type!r}")
    parts = text.split(",")
    if len(parts) != len(kinds):
        raise EntryError(f"{text!r} is not a {set_type} entry")
    entry = Entry()
    for kind, part in zip(kinds, parts, strict=True):
        if kind == "ip":
            entry = replace(entry, address=_address(part, family))
        elif kind == "ip2":
            entry = replace(entry, address2=_address(part, family))
        elif kind == "bare_port":
            entry = replace(entry, port=_port(part))
        elif kind == "port":
            protocol, _, port = part.partition(":")
            if protocol not in PROTOCOLS:
                raise EntryError(f"{part!r} is not protocol:port with one of {PROTOCOLS}")
            entry = replace(entry, protocol=protocol, port=_port(port))
        else:
            network = _network(part, family)
            entry = replace(entry, address2=network.network_address, prefix2=network.prefixlen)
    return entry


def same_kind(one: IPSetSpec, other: IPSetSpec) -> bool:
    """Whether two sets hold the same kind of entries (type and family), whatever their
    options: what creating an existing set and swapping two sets require."""
    return (one.set_type, as_listed(one).family) == (other.set_type, as_listed(other).family)
