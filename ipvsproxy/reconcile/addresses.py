"""Which service addresses to bind on, and unbind from, the dummy interface."""

from __future__ import annotations

from ipvsproxy.model import BindAddress, DesiredState, IPAddress, UnbindAddress, address_sort_key
from ipvsproxy.reconcile.ipvs_plan import excluded


def plan_addresses(
    desired: DesiredState, bound_now: frozenset[IPAddress]
) -> tuple[tuple[BindAddress, ...], tuple[UnbindAddress, ...]]:
    """Bind what is missing; unbind what is not desired, except inside excluded CIDRs."""
    bind = sorted(desired.bound_addresses - bound_now, key=address_sort_key)
    unbind = sorted(
        (a for a in bound_now - desired.bound_addresses if not excluded(a, desired)),
        key=address_sort_key,
    )
    return tuple(map(BindAddress, bind)), tuple(map(UnbindAddress, unbind))
