"""The per-chunk stream observer (``streaming.scan`` + ``streaming.usage.StreamObserver``) against
an event-by-event oracle: the SSE parser (itself checked against the spec's algorithm in
``test_sse``) followed by the observation rules the relay applied per event before it observed
per chunk. Any stream, cut at any byte boundaries, must give the oracle's observation, and each
chunk must report "data arrived" exactly when it completes a non-ping event."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.streaming.scan import MAX_EVENT_BYTES, EventScanner
from gateway.streaming.sse import SSEEvent, SSEParser, encode_event
from gateway.streaming.usage import StreamObserver, Usage, miss_reason


@dataclass
class Observation:
    usage: Usage
    stop_reason: str | None
    error_type: str | None
    message_started: bool
    message_stopped: bool
    first_content_at: float | None
    data_by_chunk: list[bool]


def _decode(data: bytes) -> dict[str, Any]:
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def oracle(chunks: list[bytes]) -> Observation:
    """Event by event, as the relay observed streams before (``SSEParser`` + per-event rules)."""
    parser = SSEParser()
    seen = Observation(Usage(), None, None, False, False, None, [])
    for index, chunk in enumerate(chunks):
        events = parser.feed(chunk)
        seen.data_by_chunk.append(any(e.event != "ping" for e in events))
        for event in events:
            _apply(seen, event, float(index))
    return seen


def _apply(seen: Observation, event: SSEEvent, now: float) -> None:
    name = event.event
    if name in ("content_block_start", "content_block_delta"):
        if seen.first_content_at is None:
            seen.first_content_at = now
    elif name == "message_delta":
        data = _decode(event.data)
        if isinstance(data.get("usage"), Mapping):
            seen.usage.update(data["usage"])
        delta = data.get("delta")
        if isinstance(delta, Mapping) and isinstance(delta.get("stop_reason"), str):
            seen.stop_reason = delta["stop_reason"]
    elif name == "message_start":
        seen.message_started = True
        message = _decode(event.data).get("message")
        if isinstance(message, Mapping):
            if isinstance(message.get("usage"), Mapping):
                seen.usage.update(message["usage"])
            seen.usage.cache_miss_reason = miss_reason(message)
    elif name == "message_stop":
        seen.message_stopped = True
    elif name == "error":
        error = _decode(event.data).get("error")
        kind = error.get("type") if isinstance(error, Mapping) else None
        seen.error_type = kind if isinstance(kind, str) and kind else "api_error"


def observe(chunks: list[bytes]) -> Observation:
    clock = iter(range(len(chunks)))
    now = 0.0

    def tick() -> float:
        return now

    observer = StreamObserver(clock=tick)
    data_by_chunk = []
    for chunk in chunks:
        now = float(next(clock))
        data_by_chunk.append(observer.feed(chunk))
    return Observation(
        observer.usage,
        observer.stop_reason,
        observer.error_type,
        observer.message_started,
        observer.message_stopped,
        observer.first_content_at,
        data_by_chunk,
    )


# -- generated streams ------------------------------------------------------------------------------

TOKENS = st.integers(min_value=0, max_value=10**6)
TEXT = st.text(st.sampled_from('ab \n\r:{}"\\é\u2028')) | st.sampled_from(
    ["event: message_delta\n", "\ndata: {}\n\n", "event: error"]
)


@st.composite
def events(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A message's events: a start, pings, content blocks, deltas, and an end (or none)."""
    usage: dict[str, Any] = {"input_tokens": draw(TOKENS), "output_tokens": draw(TOKENS)}
    if draw(st.booleans()):
        usage["cache_creation"] = {"ephemeral_5m_input_tokens": draw(TOKENS), "ephemeral_1h_input_tokens": 3}
    message: dict[str, Any] = {"id": "msg_1", "usage": usage}
    if draw(st.booleans()):
        message["diagnostics"] = {
            "cache_miss_reason": draw(st.sampled_from(["ttl_expired", "prefix_changed"]))
        }
    out: list[dict[str, Any]] = [{"type": "message_start", "message": message}]
    out += [{"type": "ping"}] * draw(st.integers(0, 2))
    if draw(st.integers(0, 4)) == 0:  # a delta before any block start: content all the same
        out.append({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "a"}})
    for index in range(draw(st.integers(0, 3))):
        out.append(
            {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}
        )
        for _ in range(draw(st.integers(0, 4))):
            delta = {"type": "text_delta", "text": draw(TEXT)}
            out.append({"type": "content_block_delta", "index": index, "delta": delta})
            if draw(st.integers(0, 5)) == 0:
                out.append({"type": draw(st.sampled_from(["ping", "message_unknown", "content_block_x"]))})
        out.append({"type": "content_block_stop", "index": index})
    for _ in range(draw(st.integers(0, 2))):
        stop = draw(st.sampled_from(["end_turn", "tool_use", "max_tokens"]))
        out.append(
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop},
                "usage": {"output_tokens": draw(TOKENS)},
            }
        )
    end = draw(st.sampled_from(["stop", "error", "none", "bad-error"]))
    if end == "stop":
        out.append({"type": "message_stop"})
    elif end == "error":
        error = {"type": draw(st.sampled_from(["overloaded_error", "api_error"])), "message": "x"}
        out.append({"type": "error", "error": error})
    elif end == "bad-error":
        out.append({"type": "error", "error": "not an object"})
    return out


FRAMINGS = [
    "canonical",
    "canonical",
    "canonical",
    "no-space",
    "comment",
    "multi-line",
    "data-first",
    "unnamed",
]


def frame(event: dict[str, Any], framing: str, eol: bytes) -> bytes:
    """One event in one of the framings SSE allows, with ``eol`` line endings."""
    name = str(event["type"]).encode()
    data = orjson.dumps(event)
    if framing == "canonical":
        lines = [b"event: " + name, b"data: " + data]
    elif framing == "no-space":
        lines = [b"event:" + name, b"data:" + data]
    elif framing == "comment":
        lines = [b": keep-alive", b"event: " + name, b"id: 7", b"data: " + data]
    elif framing == "multi-line":  # JSON whitespace between tokens: the joined data decodes the same
        lines = [
            b"event: " + name,
            *(b"data: " + line for line in orjson.dumps(event, option=orjson.OPT_INDENT_2).split(b"\n")),
        ]
    elif framing == "data-first":
        lines = [b"data: " + data, b"event: " + name]
    else:  # no event line: dispatched as 'message', which the observer ignores
        lines = [b"data: " + data]
    return b"".join(line + eol for line in lines) + eol


@st.composite
def streams(draw: st.DrawFn) -> bytes:
    eol = draw(st.sampled_from([b"\n", b"\n", b"\r\n", b"\r"]))
    framed = [frame(event, draw(st.sampled_from(FRAMINGS)), eol) for event in draw(events())]
    if draw(st.booleans()):  # a final event cut short: never dispatched
        framed.append(b"event: message_stop\ndata: {")
    return b"".join(framed)


def cut(stream: bytes, points: list[int]) -> list[bytes]:
    marks = sorted({p % (len(stream) + 1) for p in points})
    return [stream[a:b] for a, b in zip([0, *marks], [*marks, len(stream)], strict=True)]


@given(streams(), st.lists(st.integers(min_value=0), max_size=30))
@settings(max_examples=300, deadline=None)
def test_any_chunking_observes_what_the_event_parser_sees(stream: bytes, points: list[int]) -> None:
    chunks = cut(stream, points)
    chunked = observe(chunks)
    assert chunked == oracle(chunks)
    whole = observe([stream])
    for seen in (whole, chunked):  # the chunking changes when things are seen, not what
        seen.first_content_at = float(seen.first_content_at is not None)
        seen.data_by_chunk = [any(seen.data_by_chunk)]
    assert whole == chunked


def error_first(stream: bytes) -> bool:
    """In event order (the parser's): an ``error`` event comes before any content event."""
    for event in SSEParser().feed(stream):
        if event.event in ("content_block_start", "content_block_delta"):
            return False
        if event.event == "error":
            return True
    return False


@given(streams(), st.lists(st.integers(min_value=0), max_size=30))
@settings(max_examples=300, deadline=None)
def test_an_error_before_content_is_told_by_event_order_whatever_the_chunks(
    stream: bytes, points: list[int]
) -> None:
    """The relay answers such a stream as a failure before content (``guard.error_before_content``):
    an error and content in one chunk must not hide which came first."""
    observer = StreamObserver()
    for chunk in cut(stream, points):
        observer.feed(chunk)
    assert observer.error_before_content == error_first(stream)


@given(events(), st.lists(st.integers(min_value=0), max_size=20))
@settings(max_examples=100, deadline=None)
def test_observation_of_canonical_streams_matches_the_events_sent(
    sent: list[dict[str, Any]], points: list[int]
) -> None:
    """Not only the same as the oracle: right (usage, stop reason, end) for what was sent."""
    stream = b"".join(encode_event(str(e["type"]), e) for e in sent)
    observer = StreamObserver()
    for chunk in cut(stream, points):
        observer.feed(chunk)
    usage = Usage()
    usage.update(sent[0]["message"]["usage"])
    deltas = [e for e in sent if e["type"] == "message_delta"]
    for delta in deltas:
        usage.update(delta["usage"])
    usage.cache_miss_reason = sent[0]["message"].get("diagnostics", {}).get("cache_miss_reason")
    assert observer.usage == usage
    assert observer.stop_reason == (deltas[-1]["delta"]["stop_reason"] if deltas else None)
    last = sent[-1]
    assert observer.message_stopped == (last["type"] == "message_stop")
    if last["type"] == "error":
        error = last["error"]
        assert observer.error_type == (error["type"] if isinstance(error, dict) else "api_error")
    assert observer.finished == (last["type"] in ("message_stop", "error"))
    assert observer.content_seen == any(
        e["type"] in ("content_block_start", "content_block_delta") for e in sent
    )


def _event(name: str, **fields: Any) -> bytes:
    return encode_event(name, {"type": name, **fields})


START = _event("message_start", message={"usage": {"input_tokens": 5, "output_tokens": 1}})
DELTA = _event("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 9})


def test_an_oversized_content_event_is_skipped_not_buffered() -> None:
    big = _event(
        "content_block_start", index=0, content_block={"type": "text", "text": "x" * (3 * MAX_EVENT_BYTES)}
    )
    stream = START + big + DELTA + _event("message_stop")
    observer = StreamObserver()
    scanner = observer._scanner  # the bound is the point of this test
    seen_content_at = None
    for index, start in enumerate(range(0, len(stream), 65536)):
        observer.feed(stream[start : start + 65536])
        assert scanner.pending_bytes <= MAX_EVENT_BYTES
        if seen_content_at is None and observer.content_seen:
            seen_content_at = index
    assert seen_content_at == (len(START) + len(big) - 1) // 65536  # the chunk that ends the event
    assert observer.usage.output_tokens == 9 and observer.stop_reason == "end_turn"
    assert observer.finished


def test_an_event_that_never_ends_does_not_grow_memory() -> None:
    scanner = EventScanner()
    scanner.feed(b"event: content_block_delta\ndata: ")
    for _ in range(100):
        assert scanner.feed(b"y" * 65536) == ()
        assert scanner.pending_bytes <= MAX_EVENT_BYTES
    assert not scanner.content_seen


@pytest.mark.parametrize(
    ("head", "expect_error"),
    [(b"event: error\ndata: ", "api_error"), (b"data: ", None), (b"event:error\n: c\ndata: ", "api_error")],
)
def test_an_oversized_notable_event_keeps_its_name(head: bytes, expect_error: str | None) -> None:
    observer = StreamObserver()
    observer.feed(START)
    observer.feed(head + b"z" * (MAX_EVENT_BYTES + 10) + b"\n")
    assert not observer.finished
    observer.feed(b"\n" + DELTA)
    assert observer.error_type == expect_error
    assert observer.usage.output_tokens == 9


def test_a_large_event_in_tiny_chunks() -> None:
    frame = _event("content_block_delta", index=0, delta={"type": "text_delta", "text": "x" * 200_000})
    observer = StreamObserver()
    pieces = [frame[i : i + 7] for i in range(0, len(frame), 7)]
    assert not any(observer.feed(piece) for piece in pieces[:-1])
    assert observer._scanner.pending_bytes == len(frame) - len(pieces[-1])
    before = observer.content_seen
    assert observer.feed(pieces[-1]) is True
    after = observer.content_seen
    assert (before, after, observer._scanner.pending_bytes) == (False, True, 0)


def test_ping_only_chunks_are_not_data() -> None:
    observer = StreamObserver()
    assert observer.feed(START) is True
    ping = _event("ping")
    assert observer.feed(ping) is False
    assert observer.feed(ping + ping + ping) is False
    assert observer.feed(ping + ping + DELTA) is True
    assert observer.feed(b"\n") is False  # a stray blank line dispatches nothing


def test_notable_events_come_back_in_stream_order() -> None:
    error = _event("error", error={"type": "overloaded_error"})
    stop = _event("message_stop")
    for stream in (START + error + DELTA + stop, _event("ping") + error + DELTA + error + stop):
        names = [name for name, _ in EventScanner().feed(stream)]
        assert names == [e.event.encode() for e in SSEParser().feed(stream) if e.event != "ping"]


@pytest.mark.parametrize(
    ("chunk", "data", "content"),
    [
        (b"event: content_block_delta\ndata: {}\n\n", True, True),
        (b"event: content_block_delta\ndata: \n\n", True, True),  # empty data is still dispatched
        (b"event: content_block_delta\ndata: {}\n", False, False),  # not ended: carried over
        (b"event: content_block_delta\ndata: {}\nevent: ping\n\n", False, False),  # renamed: a ping
        (b"event: content_block_delta\ndata: {}\n\nevent: ping\ndata: {}\n\n", True, True),
        (b"event: content_block_deltas\ndata: {}\n\n", True, False),  # another name: plain data
    ],
)
def test_single_content_delta_chunks_match_the_event_parser(chunk: bytes, data: bool, content: bool) -> None:
    """The regex-free path for one-delta chunks agrees with the SSE rules at its edges."""
    scanner = EventScanner()
    assert list(scanner.feed(chunk)) == []
    assert (scanner.data, scanner.content_seen) == (data, content)
    assert observe([chunk]) == oracle([chunk])


@st.composite
def event_chunks(draw: st.DrawFn) -> list[bytes]:
    """A stream cut only between events, as upstreams send it: one event per chunk (the
    observer's one-delta path) or several (runs of content events passed over in one match),
    mostly framed canonically, with non-canonical events and stray bytes among them."""
    framed = [
        frame(event, draw(st.sampled_from(["canonical"] * 6 + FRAMINGS)), b"\n") for event in draw(events())
    ]
    for _ in range(draw(st.integers(0, 2))):  # a raw "\r" or stray blank line between or inside events
        at = draw(st.integers(0, len(framed)))
        framed.insert(at, draw(st.sampled_from([b"\n", b"\r", b"\r\n", b": c\n\n"])))
    if draw(st.booleans()) and framed:
        index = draw(st.integers(0, len(framed) - 1))
        event = framed[index]
        cut_at = draw(st.integers(0, len(event)))
        framed[index : index + 1] = [event[:cut_at], event[cut_at:]]
    chunks: list[bytes] = []
    while framed:
        size = draw(st.integers(1, 4)) if draw(st.booleans()) else 1
        chunks.append(b"".join(framed[:size]))
        del framed[:size]
    return chunks


@given(event_chunks())
@settings(max_examples=400, deadline=None)
def test_chunks_of_whole_events_observe_what_the_event_parser_sees(chunks: list[bytes]) -> None:
    assert observe(chunks) == oracle(chunks)


@pytest.mark.parametrize(
    "chunks",
    [
        [b"event: content_block_delta\ndata: {\r}\n\n"],  # a raw "\r" ends the data line
        [b"event: content_block_delta\ndata: {}\r\revent: error\rdata: {}\r\n\n"],  # and events
        [b"event: content_block_delta\ndata: {}\r\revent: message_stop\rdata: {}\n\n"],
        [b"event: content_block_delta\ndata: {}\n\r", b"\n"],  # "\r\n" split across chunks
        [b"event: ping\ndata: {}\r", b"\nevent: content_block_delta\ndata: {}\n\n"],
        [b"event: content_block_delta\ndata: {}\r", b"event: content_block_delta\ndata: {}\n\n"],
        [b"event: content_block_delta\ndata: {}\n\n\n", b"event: content_block_delta\ndata: {}\n\n"],
        [b"event: content_block_delta\ndata: {", b"}\n\n", b"event: content_block_delta\ndata: {}\n\n"],
        [b"data: {}", b"event: content_block_delta\ndata: {}\n\n"],  # the end of a 'message' line
        [b"data: {}\n", b"event: content_block_delta\ndata: {}\n\n", b"event: ping\ndata: {}\n\n"],
        [b"event: content_block_delta\ndata: {}\ndata: {}\n\n"],  # two data lines
        [b"event: content_block_delta\ndata: {}\n\nevent: content_block_start\ndata: {}\n\nevent: x\n\n"],
        [b"event: content_block_stop\ndata: {}\n\nevent: content_block_delta\ndata: {}\n\n"],
        [b"event: content_block_delta\ndata: {}\n\nevent: content_block_delta\ndata: {}\n\nevent: err"],
    ],
)
def test_the_fast_paths_agree_with_the_event_parser_at_their_edges(chunks: list[bytes]) -> None:
    """The observer's one-delta chunk test and the scanner's content runs, where they must let go."""
    assert observe(chunks) == oracle(chunks)
    assert observe([b"".join(chunks)]) == oracle([b"".join(chunks)])


RUN_PIECES = [
    b"event: content_block_delta\ndata: {}\n\n",
    b"event: content_block_start\ndata: {}\n\n",
    b'event: content_block_delta\ndata: {"t": "event: content_block_delta"}\n\n',
    b"event: content_block_delta\ndata: a\nevent: content_block_delta\ndata: b\n\n",  # one event, 4 lines
    b"event: content_block_delta\n\n",  # no data: not dispatched
    b"event: content_block_delta\ndata: a\ndata: b\n\n",
    b"event: content_block_deltax\ndata: {}\n\n",
    b"event: ping\ndata: {}\n\n",
    b'event: message_delta\ndata: {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, '
    b'"usage": {"output_tokens": 5}}\n\n',
    b'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error", "message": "x"}}\n\n',
    b": c\nevent: content_block_delta\ndata: {}\n\n",
    b"\n",
    b"data: x event: content_block_delta\ndata: y\n\n",  # a 'message' whose lines hold a head
]


@given(st.lists(st.sampled_from(RUN_PIECES), max_size=14), st.lists(st.integers(min_value=0), max_size=6))
@settings(max_examples=1000, deadline=None)
def test_content_runs_agree_with_the_event_parser(pieces: list[bytes], points: list[int]) -> None:
    """Runs of content events passed over in one match: heads inside data, extra or missing lines,
    near-miss names and notable events among them all end the run where the event parser does."""
    stream = b"".join(pieces)
    assert observe([stream]) == oracle([stream])
    chunks = cut(stream, points)
    assert observe(chunks) == oracle(chunks)
