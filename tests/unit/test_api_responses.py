"""What the API server answers, read within bounds: a watch stream cut into lines whatever its
HTTP chunks, the events read from them, and list pages."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ipvsproxy.cluster.api import (
    MAX_EVENT_BYTES,
    SERVICES,
    MalformedEvent,
    WatchEvent,
    decode_watch_line,
)
from ipvsproxy.cluster.connection import (
    ApiConnection,
    ApiError,
    OversizedLine,
    Request,
    request_json,
    split_lines,
)
from ipvsproxy.cluster.kubernetes_client import Configuration


def cut(data: bytes, sizes: list[int]) -> list[bytes]:
    """``data`` in chunks of the given sizes, the rest in one last chunk."""
    chunks, start = [], 0
    for size in sizes:
        chunks.append(data[start : start + size])
        start += size
    return [*chunks, data[start:]]


@given(
    st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")), max_size=8),
    st.lists(st.integers(0, 40), max_size=20),
)
def test_lines_are_the_same_however_the_stream_is_cut(lines: list[bytes], sizes: list[int]) -> None:
    data = b"\n".join(lines)
    expected = [line for line in lines if line.strip()]
    assert list(split_lines(cut(data, sizes), max_line=30)) == expected


def test_a_line_over_the_bound_is_reported_by_size_and_the_next_one_is_whole() -> None:
    data = b"a" * 25 + b"\n" + b"b" * 5 + b"\n" + b"c" * 11
    chunks = cut(data, [4] * 9)
    assert list(split_lines(chunks, max_line=10)) == [
        OversizedLine(25),
        b"bbbbb",
        OversizedLine(11),
    ]


def test_a_line_of_exactly_the_bound_is_kept() -> None:
    assert list(split_lines([b"a" * 10, b"\n"], max_line=10)) == [b"a" * 10]


def event(raw: object) -> WatchEvent | MalformedEvent:
    return decode_watch_line(json.dumps(raw).encode(), SERVICES)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b'{"type": "ADDED", "object": ' + b"[" * 5000 + b"]" * 5000 + b"}", "nested too deep"),
        (b"not json", "not JSON"),
        (b'["ADDED"]', "without an object"),
        (b'{"type": "ADDED", "object": []}', "without an object"),
        (b'{"type": "BOOKMARK", "object": {"metadata": [1, 2]}}', "metadata is not an object"),
        (b'{"type": "ADDED", "object": {"metadata": "x"}}', "metadata is not an object"),
        (b'{"type": "MODIFIED", "object": {"metadata": {"resourceVersion": 7}}}', "metadata"),
        (
            b'{"type": "RENAMED\\nforged", "object": {"metadata": {}}}',
            "unknown type 'RENAMED\\nforged'",
        ),
    ],
)
def test_a_line_that_is_no_event_is_a_one_line_malformed_event(line: bytes, reason: str) -> None:
    malformed = decode_watch_line(line, SERVICES)
    assert isinstance(malformed, MalformedEvent)
    assert reason in malformed.reason
    assert "\n" not in malformed.reason


def test_an_oversized_line_is_a_malformed_event() -> None:
    malformed = decode_watch_line(OversizedLine(MAX_EVENT_BYTES + 1), SERVICES)
    assert malformed == MalformedEvent(
        f"watching Services: the API server sent an event of {MAX_EVENT_BYTES + 1} bytes or "
        f"more, over the bound of {MAX_EVENT_BYTES}"
    )


def test_an_error_event_raises_with_its_code() -> None:
    with pytest.raises(ApiError) as raised:
        event({"type": "ERROR", "object": {"code": 410, "message": "too old"}})
    assert raised.value.status == 410


def test_a_good_event_keeps_its_version() -> None:
    good = event({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}})
    assert isinstance(good, WatchEvent)
    assert good.resource_version == "12"


class DeepListPage:
    """A response as the connection pool returns it unread: a page nested 5,000 deep."""

    data = b'{"items": ' + b"[" * 5000 + b"]" * 5000 + b"}"

    def release_conn(self) -> None:
        pass


class AnsweringDeepPages(ApiConnection):
    def send(self, action: str, request: Request, read_timeout: float) -> DeepListPage:
        return DeepListPage()


def test_a_list_page_nested_too_deep_is_a_one_line_api_error() -> None:
    with AnsweringDeepPages(Configuration()) as api, pytest.raises(ApiError) as raised:
        request_json(api, "listing Services", Request("GET", "/api/v1/services"))
    assert str(raised.value) == (
        f"listing Services: the API server at {api.host} sent JSON nested too deep to decode"
    )
