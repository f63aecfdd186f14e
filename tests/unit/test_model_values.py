"""The model's hand-written comparisons agree with comparing every field."""

from __future__ import annotations

import dataclasses
import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ipvsproxy.model import ForwardMethod, RealServer, RealServerKey

addresses = st.one_of(
    st.ip_addresses(v=4, network="10.0.0.0/30"), st.ip_addresses(v=6, network="::/126")
)
keys = st.builds(RealServerKey, addresses, st.integers(0, 2))


@given(keys, keys)
def test_real_server_key_equality_is_field_equality(one: RealServerKey, two: RealServerKey) -> None:
    assert (one == two) == ((one.address, one.port) == (two.address, two.port))
    if one == two:
        assert hash(one) == hash(two)


def test_real_server_key_tells_the_families_apart_where_their_hashes_collide() -> None:
    v4 = RealServerKey(ipaddress.IPv4Address(1), 80)
    v6 = RealServerKey(ipaddress.IPv6Address(1), 80)
    assert hash(v4) == hash(v6)
    assert v4 != v6
    assert RealServerKey(ipaddress.IPv4Address(1), 80) == v4  # equal, not the same object
    assert v4 != (ipaddress.IPv4Address(1), 80)


KEY = RealServerKey(ipaddress.IPv4Address("10.0.0.1"), 80)
CHANGED: dict[str, object] = {
    "weight": 7,
    "forward": ForwardMethod.TUNNEL,
    "upper_threshold": 9,
    "lower_threshold": 3,
}


def test_the_changes_cover_every_setting() -> None:
    assert set(CHANGED) == {f.name for f in dataclasses.fields(RealServer)} - {"key"}


@pytest.mark.parametrize("name", sorted(CHANGED))
def test_same_settings_sees_every_field_but_the_key(name: str) -> None:
    base = RealServer(KEY)
    assert base.same_settings(RealServer(RealServerKey(ipaddress.IPv4Address("10.0.0.2"), 81)))
    changed = dataclasses.replace(base, **{name: CHANGED[name]})  # type: ignore[arg-type]
    assert not base.same_settings(changed)
