"""Micro-benchmark of the cache step (``CachePipeline.before`` and ``after``), CPU time per call.

``PYTHONPATH=$PWD python -m tests.cache.bench_pipeline [--turns 20] [--sizes 50,200,800]``

* **small**: the load benchmark's request (:func:`bench.payloads.request_body`: ~2 KB system
  prompt, one user turn, no session), many iterations;
* **session N**: a Claude Code session (:mod:`bench.cc_session`: fixture 015's headers,
  billing block with a fresh ``cch=`` per request, 24 tools, the message breakpoint on the newest
  block) grown to N messages, then ``--turns`` more turns of two messages each (an assistant
  ``tool_use`` answer and a ``tool_result`` of 0.3-3 KB). Every request is parsed from its bytes, as
  the server does, so no object is shared between turns. Reported: the session's first request
  (nothing to compare with) and the median of the following turns.

Not a test (pytest does not collect it): figures for the performance note, before/after a change.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import orjson

from bench.cc_session import ClaudeCodeSession
from bench.payloads import request_body
from gateway.cache.pipeline import CachePipeline
from gateway.cache.session_store import MemorySessionStore
from gateway.config import Settings
from gateway.providers.base import ClientRequest, Operation
from gateway.streaming.usage import Usage

TEAM = "default"
USAGE = Usage(input_tokens=5, cache_read_input_tokens=1_000, cache_write_5m_tokens=100)


def pipeline(provider: str = "anthropic") -> CachePipeline:
    settings = Settings.from_environ({"ANTHROPIC_API_KEY": "k"})
    return CachePipeline(settings.cache, provider, MemorySessionStore(1000, 3600), on_break=lambda reason: None)


def output(turn: int) -> str:
    """A deterministic tool output of 0.3-3 KB."""
    line = f"turn {turn}: drwxr-xr-x  5 user staff  160 Jan  1 12:00 src/module_{turn}.py\n"
    return line * (4 + (turn * 7919) % 36)


def grow(session: ClaudeCodeSession, turn: int) -> None:
    tool_id = f"toolu_{turn:020d}"
    session.add_answer(
        [
            {"type": "text", "text": f"Let me look at step {turn} of the task."},
            {"type": "tool_use", "id": tool_id, "name": "Bash", "input": {"command": f"ls -la src/{turn}"}},
        ]
    )
    session.add_tool_results([(tool_id, output(turn))])


def client_request(session: ClaudeCodeSession, index: int) -> ClientRequest:
    body = {**session.other_fields, **session.next_request()}
    raw = orjson.dumps(body)
    headers = list(session.headers().items())
    return ClientRequest(Operation.MESSAGES, raw, orjson.loads(raw), headers, f"req-{index}")


async def timed(cache: CachePipeline, client: ClientRequest) -> tuple[float, float]:
    start = time.process_time()
    _, context = await cache.before(client, TEAM)
    middle = time.process_time()
    cache.after(context, USAGE, 200, "anthropic")
    return middle - start, time.process_time() - middle


async def small(iterations: int) -> float:
    cache = pipeline()
    raw = request_body(stream=False)
    headers = [("content-type", "application/json"), ("anthropic-version", "2023-06-01")]
    requests = [
        ClientRequest(Operation.MESSAGES, raw, orjson.loads(raw), headers, f"r{i}") for i in range(iterations)
    ]
    start = time.process_time()
    for client in requests:
        await cache.before(client, TEAM)
    return (time.process_time() - start) / iterations


async def session(size: int, turns: int) -> dict[str, Any]:
    cc = ClaudeCodeSession.from_fixture()
    turn = 0
    while len(cc.history) < size:
        turn += 1
        grow(cc, turn)
    cache = pipeline()
    first_before, first_after = await timed(cache, client_request(cc, 0))
    befores, afters = [], []
    for index in range(1, turns + 1):
        turn += 1
        grow(cc, turn)
        before, after = await timed(cache, client_request(cc, index))
        befores.append(before)
        afters.append(after)
    return {
        "messages": size,
        "body_kb": round(len(client_request(cc, 0).body) / 1024),
        "first_before_ms": round(first_before * 1e3, 3),
        "turn_before_ms": round(statistics.median(befores) * 1e3, 3),
        "turn_after_ms": round(statistics.median(afters) * 1e3, 3),
        "first_after_ms": round(first_after * 1e3, 3),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--sizes", default="50,200,800")
    parser.add_argument("--small", type=int, default=5_000, help="iterations of the small request")
    args = parser.parse_args()
    print(f"small request: before {await small(args.small) * 1e6:.1f} us")
    for size in (int(s) for s in args.sizes.split(",")):
        print(await session(size, args.turns))


if __name__ == "__main__":
    asyncio.run(main())
