"""Addresses that must never be bound: refused for that address only, wherever they appear."""

from __future__ import annotations

from typing import Any

import pytest

from ipvsproxy.cluster.parse import parse_endpoint_slice
from ipvsproxy.model import SkipReason
from tests.unit.test_translate_rules import ep, eps, run, svc, vs

UNUSABLE = [
    ("0.0.0.0", "the unspecified address"),
    ("127.0.0.1", "a loopback address"),
    ("224.0.0.1", "a multicast address"),
    ("255.255.255.255", "the broadcast address"),
    ("169.254.169.254", "link-local (the cloud metadata address)"),
    ("169.254.1.1", "a link-local address"),
]
UNUSABLE_V6 = [
    ("::", "the unspecified address"),
    ("::1", "a loopback address"),
    ("ff02::1", "a multicast address"),
    ("fe80::1", "a link-local address"),
    ("fd00::1%eth0", "a zoned IPv6 address (ipset and IPVS take no zone)"),
    ("::ffff:7f00:1", "an IPv4-mapped IPv6 address"),
]


def _skips(state: Any) -> list[str]:
    return [r.reason for r in state.rejections if r.category is SkipReason.UNUSABLE_ADDRESS]


@pytest.mark.parametrize(("address", "reason"), UNUSABLE)
def test_external_ip_is_refused_alone(address: str, reason: str) -> None:
    state = run([svc({"externalIPs": [address, "203.0.113.5"]})])
    assert _skips(state) == [f"externalIP {address} is {reason}; ignored"]
    assert vs("TCP", "203.0.113.5", 80) in state.virtual_servers
    assert vs("TCP", "10.96.0.1", 80) in state.virtual_servers
    assert all(str(key.address) != address for key in state.virtual_servers)


@pytest.mark.parametrize(("address", "reason"), UNUSABLE)
def test_load_balancer_ingress_is_refused_alone(address: str, reason: str) -> None:
    service = svc({"type": "LoadBalancer"})
    service["status"] = {"loadBalancer": {"ingress": [{"ip": address}, {"ip": "203.0.113.6"}]}}
    state = run([service])
    assert _skips(state) == [f"load-balancer ingress IP {address} is {reason}; ignored"]
    assert vs("TCP", "203.0.113.6", 80) in state.virtual_servers


@pytest.mark.parametrize(("address", "reason"), UNUSABLE + UNUSABLE_V6)
def test_cluster_ip_is_refused_alone(address: str, reason: str) -> None:
    other = "10.96.0.9" if ":" in address else "fd00:96::1"
    state = run([svc({"clusterIPs": [address, other]})])
    assert _skips(state) == [f"clusterIP {address} is {reason}; ignored"]
    assert [str(key.address) for key in state.virtual_servers] == [other]
    assert {str(a) for a in state.bound_addresses} == {other}


@pytest.mark.parametrize(("address", "reason"), UNUSABLE)
def test_endpoint_address_is_refused_alone(address: str, reason: str) -> None:
    state = run([svc({}), eps([ep(address), ep("10.244.0.9")])])
    assert {str(k) for k in state.virtual_servers[vs("TCP", "10.96.0.1", 80)].real_servers} == {
        "10.244.0.9:8080"
    }
    assert [(r.object, r.reason) for r in state.rejections] == []


@pytest.mark.parametrize(("address", "reason"), UNUSABLE_V6)
def test_ipv6_endpoint_address_is_refused_alone(address: str, reason: str) -> None:
    parsed, rejections = parse_endpoint_slice(
        eps([ep(address), ep("fd00:244::9")], address_type="IPv6")
    )
    assert parsed is not None
    assert [e.addresses[0] for e in parsed.endpoints] == ["fd00:244::9"]
    assert [(r.reason, r.category) for r in rejections] == [
        (
            f"endpoints[0] address {address} is {reason}; endpoint dropped",
            SkipReason.UNUSABLE_ADDRESS,
        )
    ]
