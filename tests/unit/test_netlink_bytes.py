"""The kernel layer's netlink bytes against the real world's, without a kernel.

``tests/netlink/vectors.json`` holds, for each case of ``tests/netlink/cases.py``, the request
the reference tool (ipvsadm, ipset, ip, conntrack) sent the lab's kernel to do what our request
does, and the kernel's answer to a dump afterwards, captured by ``tests/netlink/capture.py``
(which also saw the kernel take our request and then hold the same state). Here each request
of ours must say, attribute by attribute, what the tool's says, and each of our decoders must
read the kernel's answer as what was written: a wrong attribute number fails both, even where
our encoder and decoder agree with each other.
"""

from __future__ import annotations

import json
import operator
import socket
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest
from pyroute2.netlink.generic import ipvs as genl_ipvs
from pyroute2.netlink.nfnetlink.nfctsocket import nfct_msg

from ipvsproxy.kernel import addresses, ipvs
from ipvsproxy.kernel.conntrack import decode_flow
from ipvsproxy.kernel.ipset.codec import decode_parts
from ipvsproxy.kernel.protocols import merged_sets
from tests.netlink.cases import CASES, Case, Context, Same
from tests.netlink.tree import NLMSG_HEADER_SIZE, Leaf, leaves, message_leaves

VECTORS = json.loads((Path(__file__).parents[1] / "netlink" / "vectors.json").read_text())
CONTEXT = Context(**VECTORS["context"])
NLMSG_TYPE = slice(4, 6)


def _vector(case: Case) -> dict[str, object]:
    vector: dict[str, object] = VECTORS["cases"][case.name]
    return vector


def _messages(case: Case, which: str) -> list[bytes]:
    found = _vector(case).get(which, [])
    assert isinstance(found, list)
    return [bytes.fromhex(text) for text in found]


def _unmatched(
    ours: list[Leaf], theirs: list[Leaf], differences: Mapping[tuple[int, ...], Same]
) -> list[str]:
    """Our attributes that the tool's request does not carry with the same meaning."""
    left = list(theirs)
    unmatched = []
    for path, payload in ours:
        same: Same = differences.get(path, operator.eq)
        found = next(
            (index for index, (their_path, their_payload) in enumerate(left)
             if their_path == path and same(payload, their_payload)),
            None,
        )  # fmt: skip
        if found is None:
            unmatched.append(f"attribute {path} = {payload.hex()}")
        else:
            del left[found]
    return unmatched


def test_every_case_has_its_vector_captured_with_its_command() -> None:
    assert sorted(VECTORS["cases"]) == sorted(case.name for case in CASES)
    stale = [case.name for case in CASES if _vector(case)["command"] != list(case.reference)]
    assert stale == [], "re-capture: " + VECTORS["recapture"]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_our_request_says_what_the_reference_tool_says(case: Case) -> None:
    theirs = bytes.fromhex(str(_vector(case)["reference"]))
    kind, _, body = case.ours(CONTEXT)

    assert int.from_bytes(theirs[NLMSG_TYPE], "little") == kind
    if case.same_header:
        assert body[: case.header] == theirs[NLMSG_HEADER_SIZE : NLMSG_HEADER_SIZE + case.header]
    ours = leaves(body[case.header :], case.nested)
    assert ours, "our request carries no attribute"
    their_leaves = message_leaves(theirs, case.header, case.nested)
    assert _unmatched(ours, their_leaves, case.differences) == []


def _ipvs_objects(messages: Iterable[bytes]) -> set[object]:
    found: set[object] = set()
    for message in messages:
        command = message[NLMSG_HEADER_SIZE]
        if command == genl_ipvs.IPVS_CMD_NEW_SERVICE:
            found.add(ipvs._virtual_server(ipvs._reply(message, "IPVS_CMD_ATTR_SERVICE")))
        elif command == genl_ipvs.IPVS_CMD_NEW_DEST:
            # AF_INET: the kernel names each destination's family itself.
            attrs = ipvs._reply(message, "IPVS_CMD_ATTR_DEST")
            found.add(ipvs._real_server_state(attrs, socket.AF_INET).server)
        else:
            found.add(ipvs.decode_timeouts(message))
    return found


def _flows(messages: Iterable[bytes]) -> set[object]:
    found: set[object] = set()
    for data in messages:
        message = nfct_msg(data)
        message.decode()
        found.add(decode_flow(message))
    return found


def _decoded(state: str, messages: list[bytes]) -> set[object]:
    """What our decoder of ``state`` reads in the kernel's answers."""
    if state.startswith("ipvs"):
        return _ipvs_objects(messages)
    if state == "ipset":
        return set(merged_sets(decode_parts(messages)).values())
    if state == "addresses":
        found = (addresses.decode_address(message) for message in messages)
        return {entry[1] for entry in found if entry and entry[0] == CONTEXT.interface}
    return _flows(messages)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_our_decoder_reads_the_kernels_answer_as_written(case: Case) -> None:
    assert _decoded(case.state, _messages(case, "kernel")) == case.expected


@pytest.mark.parametrize(
    "case", [case for case in CASES if case.expected_before], ids=lambda case: case.name
)
def test_our_decoder_reads_the_kernels_answer_before_the_change(case: Case) -> None:
    assert _decoded(case.state, _messages(case, "before")) == case.expected_before
