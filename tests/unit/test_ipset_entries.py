"""What translate writes into sets is what the kernel layer accepts and reads back unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from ipvsproxy.cluster.source import load_snapshot
from ipvsproxy.kernel.errors import EntryError
from ipvsproxy.kernel.ipset.entries import check_spec, parse_entry
from ipvsproxy.model import IPFamily, IPSetSpec
from ipvsproxy.translate import Settings, translate

EXAMPLE = Path(__file__).parents[2] / "examples" / "cluster.yaml"
V4, V6 = IPFamily.IPV4, IPFamily.IPV6


def test_every_set_translate_makes_can_be_created_and_its_entries_read_back_unchanged() -> None:
    snapshot, _ = load_snapshot(EXAMPLE, "node-a")
    ipsets = translate(snapshot, Settings()).ipsets
    # kube-proxy cuts this one's IPv6 name to the kernel's 31 characters.
    assert "KUBE-6-NODE-PORT-LOCAL-SCTP-HAS" in ipsets
    for content in ipsets.values():
        check_spec(content.spec)
        for entry in content.entries:
            assert str(parse_entry(entry, content.spec.set_type, content.spec.family)) == entry


@pytest.mark.parametrize(
    ("text", "set_type", "family", "listed"),
    [
        ("10.0.0.1,tcp:80,10.1.2.3/8", "hash:ip,port,net", V4, "10.0.0.1,tcp:80,10.0.0.0/8"),
        ("10.0.0.1,tcp:80,10.1.2.3/32", "hash:ip,port,net", V4, "10.0.0.1,tcp:80,10.1.2.3"),
        ("fd00:0::0:1,udp:53", "hash:ip,port", V6, "fd00::1,udp:53"),
    ],
)
def test_entries_are_read_back_in_the_form_ipset_lists(
    text: str, set_type: str, family: IPFamily, listed: str
) -> None:
    assert str(parse_entry(text, set_type, family)) == listed


@pytest.mark.parametrize(
    ("text", "set_type", "family"),
    [
        ("10.0.0.1,80", "hash:ip,port", V4),
        ("10.0.0.1,icmp:8", "hash:ip,port", V4),
        ("10.0.0.1,tcp:80", "hash:ip,port", V6),
        ("10.0.0.1/24", "hash:ip", V4),
        ("10.0.0.1,tcp:80,0.0.0.0/0", "hash:ip,port,net", V4),
        ("70000", "bitmap:port", V4),
        ("-1", "bitmap:port", V4),
        ("10.0.0.1", "hash:net", V4),
    ],
)
def test_entries_the_kernel_would_read_differently_are_refused(
    text: str, set_type: str, family: IPFamily
) -> None:
    with pytest.raises(EntryError):
        parse_entry(text, set_type, family)


def test_names_longer_than_the_kernel_takes_are_refused() -> None:
    with pytest.raises(EntryError, match="31"):
        check_spec(IPSetSpec("KUBE-6-NODE-PORT-LOCAL-SCTP-HASH", "hash:ip,port", V6))
