"""Micro-benchmark: Bedrock event-stream decode + SSE re-emit, against plain SSE passthrough.

``python -m bench.eventstream_bench [--deltas 2000] [--chunk 16384] [--repeat 7]``

One core, no I/O. A realistic streamed turn (``message_start``, ``--deltas`` text deltas of a few
words each, ``message_delta``, ``message_stop`` with Bedrock's invocation metrics) is encoded once
as Bedrock event-stream frames and once as first-party SSE, then cut into ``--chunk``-byte reads.
Measured, best of ``--repeat`` runs:

* ``sse passthrough``: the first-party relay's per-stream work, the usage observer
  (:class:`~gateway.streaming.usage.StreamObserver`) fed every chunk;
* ``eventstream -> sse``: :class:`~gateway.streaming.eventstream.EventStreamToSSE` (botocore's
  frame decoder, CRC checks, base64, re-framing) fed every chunk;
* ``bedrock relay``: both, as the Bedrock relay runs them (translate, then observe the SSE).

Figures: events/s and MB/s of the input (event-stream bytes for the Bedrock rows).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from emulators.bedrock_frames import chunk_frame
from gateway.streaming.eventstream import EventStreamToSSE
from gateway.streaming.sse import encode_event
from gateway.streaming.usage import StreamObserver

_WORDS = [
    "the",
    "gateway",
    "relays",
    "every",
    "token",
    "as",
    "soon",
    "as",
    "it",
    "arrives",
    "from",
    "the",
    "upstream",
    "model",
]


def stream_events(deltas: int) -> list[dict[str, Any]]:
    """A text turn of ``deltas`` content deltas, as Anthropic stream events."""
    usage = {"input_tokens": 612, "cache_read_input_tokens": 480, "cache_creation_input_tokens": 0}
    events: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {
                "id": "msg_bench",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5-20250929",
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {**usage, "output_tokens": 1},
            },
        },
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    ]
    for i in range(deltas):
        text = " ".join(_WORDS[(i + k) % len(_WORDS)] for k in range(3)) + " "
        events.append(
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}
        )
    events += [
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {**usage, "output_tokens": deltas * 3},
        },
        {
            "type": "message_stop",
            "amazon-bedrock-invocationMetrics": {
                "inputTokenCount": 612,
                "outputTokenCount": deltas * 3,
                "invocationLatency": 4000,
                "firstByteLatency": 300,
            },
        },
    ]
    return events


def cut(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


@dataclass(frozen=True, slots=True)
class Result:
    name: str
    seconds: float
    events: int
    input_bytes: int

    def line(self) -> str:
        return (
            f"{self.name:<20} {self.events / self.seconds:>12,.0f} events/s "
            f"{self.input_bytes / self.seconds / 1e6:>9.1f} MB/s  ({self.seconds * 1e3:.2f} ms/stream)"
        )


def best_of(repeat: int, run: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def _unmapped(code: str, message: str) -> tuple[str, str]:
    return "api_error", message


def run(deltas: int, chunk: int, repeat: int) -> list[Result]:
    events = stream_events(deltas)
    frames = cut(b"".join(chunk_frame(event) for event in events), chunk)
    sse = cut(b"".join(encode_event(event["type"], event) for event in events), chunk)
    frame_bytes = sum(map(len, frames))
    sse_bytes = sum(map(len, sse))

    def passthrough() -> None:
        observer = StreamObserver()
        for piece in sse:
            observer.feed(piece)
        assert observer.message_stopped

    def translate() -> None:
        translator = EventStreamToSSE(_unmapped)
        for piece in frames:
            translator.feed(piece)

    def bedrock_relay() -> None:
        translator = EventStreamToSSE(_unmapped)
        observer = StreamObserver()
        for piece in frames:
            observer.feed(translator.feed(piece))
        assert observer.message_stopped

    count = len(events)
    return [
        Result("sse passthrough", best_of(repeat, passthrough), count, sse_bytes),
        Result("eventstream -> sse", best_of(repeat, translate), count, frame_bytes),
        Result("bedrock relay", best_of(repeat, bedrock_relay), count, frame_bytes),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.eventstream_bench", description=__doc__)
    parser.add_argument("--deltas", type=int, default=2000, help="text deltas per stream")
    parser.add_argument("--chunk", type=int, default=16384, help="bytes per simulated socket read")
    parser.add_argument("--repeat", type=int, default=7, help="runs; the best is reported")
    args = parser.parse_args(argv)
    print(f"one stream of {args.deltas} text deltas, {args.chunk}-byte reads, best of {args.repeat}")
    for result in run(args.deltas, args.chunk, args.repeat):
        print(result.line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
