"""An incremental sync: plan only some virtual servers, against what the last sync left.

After a sync in which every op applied, the kernel holds the desired state it was given
(plus the real servers still draining). An incremental sync trusts that: it reads nothing
from the kernel, and plans only the virtual servers of the services that changed. A wrong
belief (someone changed the kernel meanwhile) shows up as a failed op, which makes the
caller's next sync a full one; the periodic full sync repairs whatever no op touched.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace
from types import MappingProxyType

from ipvsproxy.model import (
    DesiredState,
    IPSetContent,
    ObjectKey,
    RealServer,
    RealServerKey,
    RealServerRef,
    RealServerState,
    VirtualServerKey,
    VirtualServerState,
)
from ipvsproxy.reconcile.graceful import Drain
from ipvsproxy.reconcile.ipsets import canonical_entries
from ipvsproxy.reconcile.state import KernelState


def services_virtual_servers(
    services: Collection[ObjectKey], *states: DesiredState
) -> frozenset[VirtualServerKey]:
    """The virtual servers any of ``states`` gives to one of ``services``."""
    return frozenset(
        key
        for state in states
        for key, wanted in state.virtual_servers.items()
        if wanted.owner.service in services
    )


def restrict(
    desired: DesiredState, scope: Collection[VirtualServerKey], previous: DesiredState | None
) -> DesiredState:
    """``desired`` with only the virtual servers in ``scope``, and no iptables restore when
    the rules are the ones the previous sync wrote."""
    wanted = desired.virtual_servers
    return replace(
        desired,
        virtual_servers=MappingProxyType({k: wanted[k] for k in scope if k in wanted}),
        iptables=()
        if previous is not None and desired.iptables == previous.iptables
        else desired.iptables,
    )


def believed_state(
    previous: DesiredState,
    drains: Mapping[RealServerRef, Drain],
    scope: Iterable[VirtualServerKey],
    interface_exists: bool = True,
) -> KernelState:
    """The kernel as the previous, fully applied, sync left it; IPVS only within ``scope``."""
    draining: dict[VirtualServerKey, list[Drain]] = {}
    for drain in drains.values():
        draining.setdefault(drain.ref.virtual, []).append(drain)
    table: dict[VirtualServerKey, VirtualServerState] = {}
    for key in scope:
        wanted = previous.virtual_servers.get(key)
        if wanted is None:
            continue
        # Connection counts are not known without reading the kernel: assume one, so that a
        # removed TCP real server drains (weight 0) and the next drain check deletes it once
        # the kernel shows it idle, as kube-proxy's graceful termination does.
        reals: dict[RealServerKey, RealServerState] = {
            real: RealServerState(server, inactive_connections=1)
            for real, server in wanted.real_servers.items()
        }
        for drain in draining.get(key, ()):
            reals[drain.ref.real] = RealServerState(
                RealServer(drain.ref.real, weight=0),
                active_connections=drain.active_connections,
                inactive_connections=drain.inactive_connections,
            )
        table[key] = VirtualServerState(wanted.server, MappingProxyType(reals))
    return KernelState(
        ipvs=MappingProxyType(table),
        interface_exists=interface_exists,
        bound_addresses=previous.bound_addresses,
        ipsets=MappingProxyType(
            {
                name: IPSetContent(content.spec, canonical_entries(content))
                for name, content in previous.ipsets.items()
            }
        ),
    )
