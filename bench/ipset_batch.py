"""Add 10,000 entries to a hash:ip,port set three ways and print the wall time of each.

Run it inside a lab boot only, since it programs the kernel:
``nox -s bench`` does (``python -m tests.lab --run python bench/ipset_batch.py``).
A figure, not a pass/fail check.
"""

from __future__ import annotations

import subprocess
import time

from ipvsproxy.kernel.ipset.netlink import NetlinkIPSets
from ipvsproxy.model import IPFamily, IPSetContent, IPSetSpec

ENTRIES = 10_000
SET = IPSetSpec("IPVSP-BENCH", "hash:ip,port", IPFamily.IPV4)


def _entries() -> list[str]:
    return [f"10.96.{i // 250}.{i % 250 + 1},tcp:{80 + i % 3}" for i in range(ENTRIES)]


def _timed_netlink(batch_size: int) -> float:
    with NetlinkIPSets(batch_size=batch_size) as ipsets:
        ipsets.create(SET)
        start = time.perf_counter()
        results = ipsets.add(SET.name, _entries())
        elapsed = time.perf_counter() - start
        assert results.count(None) == len(results)
        assert len(ipsets.list_sets()[SET.name].entries) == ENTRIES
        ipsets.destroy(SET.name)
    return elapsed


def _timed_ipset_restore() -> float:
    script = "".join(f"add {SET.name} {entry}\n" for entry in _entries())
    with NetlinkIPSets() as ipsets:
        ipsets.create(SET)
        start = time.perf_counter()
        subprocess.run(["ipset", "restore"], input=script, text=True, check=True)
        elapsed = time.perf_counter() - start
        ipsets.destroy(SET.name)
    return elapsed


def _timed(action: str) -> float:
    with NetlinkIPSets() as ipsets:
        ipsets.create(SET)
        ipsets.add(SET.name, _entries())
        start = time.perf_counter()
        if action == "list":
            ipsets.list_sets()
        else:
            ipsets.replace(IPSetContent(SET, frozenset(_entries())))
        elapsed = time.perf_counter() - start
        ipsets.destroy(SET.name)
    return elapsed


def main() -> None:
    for name, seconds in (
        ("add, netlink, 256 requests per sendmsg", _timed_netlink(256)),
        ("add, netlink, one request per round trip", _timed_netlink(1)),
        ("add, ipset restore", _timed_ipset_restore()),
        ("list_sets", _timed("list")),
        ("replace (temporary set + swap)", _timed("replace")),
    ):
        print(f"{name:42} {ENTRIES} entries {seconds:7.3f} s {ENTRIES / seconds:9.0f} /s")


if __name__ == "__main__":
    main()
