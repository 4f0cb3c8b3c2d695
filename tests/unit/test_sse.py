from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from gateway.streaming.sse import SSEEvent, SSEParser, encode_event

STREAM = (
    encode_event("message_start", {"type": "message_start"})
    + b": keep-alive comment\n\n"
    + b'event: content_block_delta\r\ndata: {"a":\r\ndata: 1}\r\n\r\n'
    + b"data: unnamed\n\n"
    + b"event: ping\nid: 7\nretry: 10\ndata: {}\n\n"
)
EXPECTED = [
    SSEEvent("message_start", b'{"type":"message_start"}'),
    SSEEvent("content_block_delta", b'{"a":\n1}'),
    SSEEvent("message", b"unnamed"),
    SSEEvent("ping", b"{}"),
]


def test_whole_stream() -> None:
    assert SSEParser().feed(STREAM) == EXPECTED


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=40))
def test_any_chunking_yields_the_same_events(cuts: list[int]) -> None:
    points = sorted(set(cuts))
    chunks = [STREAM[a:b] for a, b in zip([0, *points], [*points, len(STREAM)], strict=True)]
    parser = SSEParser()
    events: list[SSEEvent] = []
    for chunk in chunks:
        events.extend(parser.feed(chunk))
    assert events == EXPECTED
    assert parser.pending_bytes == 0


def test_unterminated_event_is_not_dispatched() -> None:
    parser = SSEParser()
    assert parser.feed(b"event: a\ndata: 1\n") == []
    assert parser.flush() == []
    assert parser.feed(b"\n") == []  # state was reset by flush


def test_field_without_space_and_without_colon() -> None:
    assert SSEParser().feed(b"event:x\ndata:1\ndata\n\n") == [SSEEvent("x", b"1\n")]


def test_large_line_in_tiny_chunks_is_linear() -> None:
    parser = SSEParser()
    payload = b"x" * 200_000
    frame = b"event: big\ndata: " + payload + b"\n\n"
    events: list[SSEEvent] = []
    for i in range(0, len(frame), 7):
        events.extend(parser.feed(frame[i : i + 7]))
    assert events == [SSEEvent("big", payload)]


def test_encode_event_shapes() -> None:
    assert encode_event("ping", {"type": "ping"}) == b'event: ping\ndata: {"type":"ping"}\n\n'
    assert encode_event("e", "x") == b"event: e\ndata: x\n\n"


def reference_parse(stream: bytes) -> list[SSEEvent]:
    """The SSE spec's algorithm applied to the whole input at once (\\n, \\r\\n and \\r endings)."""
    events: list[SSEEvent] = []
    name, data = "", list[bytes]()
    lines = re.split(rb"\r\n|\r|\n", stream)
    for line in lines[:-1]:  # the last piece is an unterminated line
        if not line:
            if data:
                events.append(SSEEvent(name or "message", b"\n".join(data)))
            name, data = "", []
            continue
        if line.startswith(b":"):
            continue
        field, _, value = line.partition(b":")
        value = value[1:] if value.startswith(b" ") else value
        if field == b"data":
            data.append(value)
        elif field == b"event":
            name = value.decode("utf-8", "replace")
    return events


LINES = st.sampled_from(
    [
        b"event: message_start",
        b"event: content_block_delta",
        b"event:x",
        b'data: {"type":"ping"}',
        b"data: a",
        b"data:b",
        b"data",
        b": comment",
        b"id: 1",
        b"",
        b"",
    ]
)


@given(
    st.lists(LINES, max_size=30),
    st.sampled_from([b"\n", b"\r\n", b"\r"]),
    st.lists(st.integers(min_value=0, max_value=2000), max_size=20),
)
def test_matches_the_reference_algorithm(lines: list[bytes], ending: bytes, cuts: list[int]) -> None:
    stream = b"".join(line + ending for line in lines)
    points = sorted({c for c in cuts if c <= len(stream)})
    parser = SSEParser()
    events: list[SSEEvent] = []
    for a, b in zip([0, *points], [*points, len(stream)], strict=True):
        events.extend(parser.feed(stream[a:b]))
    assert events == reference_parse(stream)


def test_crlf_endings_starting_mid_stream() -> None:
    parser = SSEParser()
    first = parser.feed(b"event: a\ndata: 1\n\nevent: b\nda")
    second = parser.feed(b"ta: 2\r\n\r\n")
    assert first + second == [SSEEvent("a", b"1"), SSEEvent("b", b"2")]


def test_lone_cr_endings_and_a_crlf_split_across_chunks() -> None:
    parser = SSEParser()
    events = parser.feed(b"event: a\rdata: 1\r\rdata: 2\r")
    events += parser.feed(b"")  # an empty chunk keeps the pending \r
    events += parser.feed(b"\n\r\n")  # completes "\r\n", then a blank line
    assert events == [SSEEvent("a", b"1"), SSEEvent("message", b"2")]
    assert parser.pending_bytes == 0
