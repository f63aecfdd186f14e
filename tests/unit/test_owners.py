"""The daemon's owners answer for ``show``: round trip, one Service, bounds, bad bodies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ipvsproxy.cluster.source import load_snapshot
from ipvsproxy.model import DesiredState, ObjectKey
from ipvsproxy.owners import owners_json, owners_of, parse_owners
from ipvsproxy.translate import Settings, translate

WEB = ObjectKey("shop", "web")


def _desired() -> DesiredState:
    snapshot, _ = load_snapshot(Path("examples/cluster.yaml"), "node-a")
    return translate(snapshot, Settings())


def test_the_answer_carries_every_owner_and_wanted_real_server() -> None:
    desired = _desired()
    answer = parse_owners(owners_json(desired))
    assert answer.owners == owners_of(desired)
    assert not answer.truncated
    web = parse_owners(owners_json(desired, WEB)).owners
    assert web and web == owners_of(desired, WEB)
    assert all(owner.port.service == WEB for owner in web.values())


def test_the_answer_is_bounded_and_says_so() -> None:
    answer = parse_owners(owners_json(_desired(), limit=3))
    assert (len(answer.owners), answer.truncated) == (3, True)


def test_before_the_first_sync_there_is_nothing_to_name() -> None:
    with pytest.raises(ValueError, match="not synced yet"):
        parse_owners(owners_json(None))


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        b'{"schema": "other/v1"}',
        b"[" * 100_000,
        json.dumps({"schema": "ipvsproxy.io/owners/v1", "synced": True}).encode(),
    ],
)
def test_a_body_that_is_no_answer_is_one_value_error(body: bytes) -> None:
    with pytest.raises(ValueError):
        parse_owners(body)


def test_an_entry_that_does_not_parse_is_refused() -> None:
    document = json.loads(owners_json(_desired()))
    document["virtualServers"][0]["port"] = 70000
    with pytest.raises(ValueError, match="is not a port"):
        parse_owners(json.dumps(document).encode())
    document["virtualServers"][0]["port"] = 80
    document["virtualServers"][0]["service"] = "no-namespace"
    with pytest.raises(ValueError, match="is not NAMESPACE/NAME"):
        parse_owners(json.dumps(document).encode())
