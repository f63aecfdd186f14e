"""In-memory interfaces and addresses, as ``NetlinkAddresses`` sees them."""

from __future__ import annotations

import errno
from collections.abc import Iterator, Sequence

from ipvsproxy.kernel.errors import refused
from ipvsproxy.model import AddressOp, BatchResult, BindAddress, IPAddress


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

    def local_addresses(self, except_interface: str) -> frozenset[IPAddress]:
        return frozenset().union(
            *(found for name, found in self._interfaces.items() if name != except_interface)
        )

    def listed(self, name: str) -> Iterator[tuple[IPAddress, bool]]:
        # Read at the first step, as a netlink dump is.
        found = [
            (address, owner == name) for owner, held in self._interfaces.items() for address in held
        ]
        yield from found

    def apply(self, name: str, ops: Sequence[AddressOp]) -> BatchResult:
        bound = self._interfaces.get(name)
        if bound is None:
            return [refused(errno.ENODEV) for _ in ops]
        results: BatchResult = []
        for op in ops:
            if isinstance(op, BindAddress):
                already = op.address in bound
                bound.add(op.address)
                results.append(refused(errno.EEXIST) if already else None)
            else:
                missing = op.address not in bound
                bound.discard(op.address)
                results.append(refused(errno.EADDRNOTAVAIL) if missing else None)
        return results
