"""Capture the test vectors of tests/unit/test_netlink_bytes.py in the lab: for each case of
``cases.py``, what the reference tool sends the kernel and what the kernel answers after it.

    .nox/kernel/bin/python -m tests.netlink.capture     # as root; boots one lab kernel

rewrites ``tests/netlink/vectors.json``. Outside the lab it boots a lab kernel and runs itself
there. Inside, an nlmon device shows every netlink message of the kernel; for each case the
kernel is emptied, the case's setup run, then the reference command, whose request and the
kernel's answer to a dump of the state are kept. Then the kernel is emptied again, the setup
run, and our own request sent instead: the kernel must take it and then answer the same dump
with the same bytes, or nothing is written. Re-capture after changing a case, or to check the
encoders against another kernel or tool version.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pyroute2.conntrack import Conntrack
from pyroute2.netlink.nfnetlink import NFNL_SUBSYS_IPSET
from pyroute2.netlink.nfnetlink import ipset as nfipset

from ipvsproxy.kernel.addresses import NETLINK_ROUTE, RTM_NEWADDR, NetlinkAddresses
from ipvsproxy.kernel.ipset.netlink import NetlinkIPSets
from ipvsproxy.kernel.ipvs import NetlinkIPVS
from ipvsproxy.kernel.netlink import (
    NETLINK_GENERIC,
    NETLINK_NETFILTER,
    NLA_F_NET_BYTEORDER,
    NLM_F_REQUEST,
    NLMSG_HEADER,
    BatchSocket,
    generic_family_id,
)
from tests.lab.boot import run_in_lab
from tests.netlink.cases import CASES, INTERFACE, Case, Context
from tests.netlink.tree import message_leaves

VECTORS = Path(__file__).with_name("vectors.json")
MONITOR = "ipvsp-nlmon0"
ETH_P_ALL = 0x0003
CT_NEW = 1 << 8  # NFNL_SUBSYS_CTNETLINK << 8 | IPCTNL_MSG_CT_NEW
RESET = (
    ("ipvsadm", "-C"),
    ("ipvsadm", "--set", "900", "120", "300"),
    ("ipset", "destroy"),
    ("ip", "address", "flush", "dev", INTERFACE),
    ("conntrack", "-F"),
)
# (netlink protocol, message type): the sender's flags, the whole message.
Message = tuple[int, int, int, bytes]


def _run(command: tuple[str, ...]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"capture: {' '.join(command)}: {done.stderr.strip()}")


def _messages(packet: bytes, protocol: int) -> Iterator[Message]:
    offset = 0
    while offset + NLMSG_HEADER.size <= len(packet):
        length, kind, flags, _, _ = NLMSG_HEADER.unpack_from(packet, offset)
        if length < NLMSG_HEADER.size:
            return
        yield protocol, kind, flags, packet[offset : offset + length]
        offset += (length + 3) & ~3


@contextmanager
def _watching() -> Iterator[list[Message]]:
    """Every netlink message that passes while the block runs, in both directions."""
    monitor = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    monitor.bind((MONITOR, 0))
    seen: list[Message] = []
    try:
        yield seen
        while select.select([monitor], [], [], 0.2)[0]:
            packet, (_, protocol, *_) = monitor.recvfrom(1 << 20)
            seen.extend(_messages(packet, protocol))
    finally:
        monitor.close()


def _read_state(state: str) -> None:
    """Ask the kernel for the whole of one kind of state, as the kernel layer does."""
    if state in ("ipvs", "ipvs_timeouts"):
        with NetlinkIPVS() as ipvs:
            ipvs.dump() if state == "ipvs" else ipvs.timeouts()
    elif state == "ipset":
        with NetlinkIPSets() as ipsets:
            ipsets.list_sets()
    elif state == "addresses":
        with NetlinkAddresses() as addresses:
            addresses.all_addresses()
    else:
        for family in (socket.AF_INET, socket.AF_INET6):
            with Conntrack(nfgen_family=family) as table:
                list(table.dump())


def _answers(state: str, context: Context) -> list[bytes]:
    """The kernel's answers to a dump of ``state``, whole messages in order."""
    protocol, kind = {
        "ipvs": (NETLINK_GENERIC, context.ipvs_family),
        "ipvs_timeouts": (NETLINK_GENERIC, context.ipvs_family),
        "ipset": (NETLINK_NETFILTER, (NFNL_SUBSYS_IPSET << 8) | nfipset.IPSET_CMD_LIST),
        "addresses": (NETLINK_ROUTE, RTM_NEWADDR),
        "conntrack": (NETLINK_NETFILTER, CT_NEW),
    }[state]
    with _watching() as seen:
        _read_state(state)
    return [
        message
        for sender, message_kind, flags, message in seen
        if sender == protocol and message_kind == kind and not flags & NLM_F_REQUEST
    ]


def _reference_request(case: Case, context: Context) -> bytes:
    """What the reference tool sent that is the request of the same kind as ours."""
    kind, _, body = case.ours(context)
    with _watching() as seen:
        _run(case.reference)
    found = [
        message
        for sender, message_kind, flags, message in seen
        if sender == case.protocol
        and message_kind == kind
        and flags & NLM_F_REQUEST
        # generic netlink: the same command too
        and (case.protocol != NETLINK_GENERIC or message[NLMSG_HEADER.size] == body[0])
    ]
    if len(found) != 1:
        raise SystemExit(f"capture: {case.name}: {len(found)} requests of type {kind} seen")
    return found[0]


# What the kernel answers differently for the same state: a hash set's random seed
# (IPSET_ATTR_DATA 7, IPSET_ATTR_INITVAL 17 in network byte order), an address's timestamps
# (IFA_CACHEINFO 6).
VARYING: dict[str, set[tuple[int, ...]]] = {
    "ipset": {(7, NLA_F_NET_BYTEORDER | 17)},
    "addresses": {(6,)},
}


def _comparable(messages: list[bytes], case: Case) -> list[object]:
    """The answers without what differs between two runs: sequence numbers, port ids."""
    varying = VARYING.get(case.state, set())
    return [
        (
            message[:8],
            message[NLMSG_HEADER.size : NLMSG_HEADER.size + case.header],
            [
                leaf
                for leaf in message_leaves(message, case.header, case.nested)
                if leaf[0] not in varying
            ],
        )
        for message in messages
    ]


def _fresh(case: Case) -> None:
    for command in (*RESET, *case.setup):
        _run(command)


def _capture(
    case: Case, context: Context, netlink: Callable[[int], BatchSocket]
) -> dict[str, object]:
    _fresh(case)
    before = _answers(case.state, context) if case.expected_before else []
    reference = _reference_request(case, context)
    theirs = _answers(case.state, context)
    _fresh(case)
    sock = netlink(case.protocol)
    try:
        (refused,) = sock.apply([case.ours(context)])
    finally:
        sock.close()
    if refused is not None:
        raise SystemExit(f"capture: {case.name}: the kernel refused ours: {refused.message}")
    ours = _answers(case.state, context)
    if _comparable(ours, case) != _comparable(theirs, case):
        shown = "\n".join(f"  ours   {m.hex()}" for m in ours)
        shown += "\n" + "\n".join(f"  theirs {m.hex()}" for m in theirs)
        raise SystemExit(f"capture: {case.name}: the kernel holds something else\n{shown}")
    vector: dict[str, object] = {
        "command": list(case.reference),
        "reference": reference.hex(),
        "kernel": [message.hex() for message in theirs],
    }
    if before:
        vector["before"] = [message.hex() for message in before]
    return vector


def capture() -> None:
    _run(("ip", "link", "add", MONITOR, "type", "nlmon"))
    _run(("ip", "link", "set", MONITOR, "up"))
    _run(("ip", "link", "add", INTERFACE, "type", "dummy"))
    generic = BatchSocket(NETLINK_GENERIC)
    try:
        context = Context(generic_family_id(generic, "IPVS"), socket.if_nametoindex(INTERFACE))
    finally:
        generic.close()
    cases = {case.name: _capture(case, context, BatchSocket) for case in CASES}
    tools = {
        tool: subprocess.run(
            [tool, *flag], capture_output=True, text=True, check=False
        ).stdout.strip().splitlines()[0]
        for tool, flag in (("ipvsadm", ["--version"]), ("ipset", ["--version"]),
                           ("ip", ["-V"]), ("conntrack", ["--version"]))
    }  # fmt: skip
    document = {
        "recapture": "as root: .nox/kernel/bin/python -m tests.netlink.capture",
        "kernel": os.uname().release,
        "tools": tools,
        "context": {"ipvs_family": context.ipvs_family, "interface": context.interface},
        "cases": cases,
    }
    VECTORS.write_text(json.dumps(document, indent=1) + "\n")
    print(f"capture: {len(cases)} cases written to {VECTORS}")


def main() -> int:
    if os.environ.get("IPVSPROXY_LAB") == "1":
        capture()
        return 0
    return run_in_lab([sys.executable, "-m", "tests.netlink.capture"])


if __name__ == "__main__":
    sys.exit(main())
