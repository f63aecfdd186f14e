"""The pure diff: desired IPVS state against the kernel's, as a minimal list of typed ops."""

from __future__ import annotations

from collections.abc import Iterable

from ipvsproxy.model import (
    AddRealServer,
    AddVirtualServer,
    DeleteRealServer,
    DeleteVirtualServer,
    DesiredState,
    IPAddress,
    IPVSOp,
    IPVSTable,
    UpdateRealServer,
    UpdateVirtualServer,
    VirtualServerKey,
)


def owned_addresses(desired: DesiredState, bound_now: Iterable[IPAddress]) -> frozenset[IPAddress]:
    """Addresses whose virtual servers are ours: kube-ipvs0's, now or to be, and node ports'."""
    return desired.bound_addresses | desired.node_addresses | frozenset(bound_now)


def plan_ipvs(
    desired: DesiredState, actual: IPVSTable, owned: frozenset[IPAddress]
) -> list[IPVSOp]:
    """Ops that turn ``actual`` into ``desired``; virtual servers not ``owned`` are left alone.

    Virtual servers come before their real servers, deletions of stale virtual servers last,
    so a batch applied in order never leaves a service without the real servers it had.
    """
    ops: list[IPVSOp] = []
    for key in sorted(desired.virtual_servers, key=VirtualServerKey.sort_key):
        wanted = desired.virtual_servers[key]
        current = actual.get(key)
        if current is None:
            ops.append(AddVirtualServer(wanted.server))
            ops.extend(
                AddRealServer(key, wanted.real_servers[real])
                for real in sorted(wanted.real_servers, key=lambda k: k.sort_key())
            )
            continue
        if current.server != wanted.server:
            ops.append(UpdateVirtualServer(wanted.server))
        both = wanted.real_servers.keys() | current.real_servers.keys()
        for real in sorted(both, key=lambda k: k.sort_key()):
            want = wanted.real_servers.get(real)
            have = current.real_servers.get(real)
            if want is None:
                ops.append(DeleteRealServer(key, real))
            elif have is None:
                ops.append(AddRealServer(key, want))
            elif have.server != want:
                ops.append(UpdateRealServer(key, want))
    ops.extend(
        DeleteVirtualServer(key)
        for key in sorted(actual, key=VirtualServerKey.sort_key)
        if key not in desired.virtual_servers
        and key.address in owned
        and not any(key.address in cidr for cidr in desired.exclude_cidrs)
    )
    return ops
