"""Addresses a service proxy must never bind or send to, whoever wrote them into a Service."""

from __future__ import annotations

import ipaddress

from ipvsproxy.model import IPAddress

_METADATA = ipaddress.IPv4Address("169.254.169.254")


def ipv4_unusable_reason(value: int) -> str | None:
    """``unusable_reason`` for an IPv4 address as an integer: no objects built, for endpoints."""
    first = value >> 24
    if value == 0:
        return "the unspecified address"
    if first == 127:
        return "a loopback address"
    if 224 <= first <= 239:
        return "a multicast address"
    if value == 0xFFFFFFFF:
        return "the broadcast address"
    if value >> 16 == 0xA9FE:
        return (
            "link-local (the cloud metadata address)"
            if value == int(_METADATA)
            else "a link-local address"
        )
    return None


def unusable_reason(address: IPAddress) -> str | None:
    """Why ``address`` may not be a service or endpoint address, or None when it may be."""
    if isinstance(address, ipaddress.IPv4Address):
        return ipv4_unusable_reason(int(address))
    if address.scope_id:
        return "a zoned IPv6 address (ipset and IPVS take no zone)"
    if address.ipv4_mapped is not None:
        return "an IPv4-mapped IPv6 address"
    if address.is_unspecified:
        return "the unspecified address"
    if address.is_loopback:
        return "a loopback address"
    if address.is_multicast:
        return "a multicast address"
    if address.is_link_local:
        return "a link-local address"
    return None
