"""Memory per session of the in-memory session store, measured with ``tracemalloc``.

``python -m bench.session_memory [--sessions 20000] [--messages 0,24,50,200] [--json OUT]``

A session is what the cache step keeps for one Claude Code session, built the way the gateway
builds it: every request goes through :class:`~gateway.cache.pipeline.CachePipeline` (``before``
then ``after``, a first request that writes the cache, so each session keeps its ``first_request``
break) into a :class:`~gateway.cache.session_store.MemorySessionStore`, under its own session id (a
36-character UUID, as Claude Code sends), in one team. What a session keeps: its entry in the
team's LRU (the id and the view), its latches (the captured cache-key betas, the TTL and scope
eligibilities), the prefix hashes of its last request (model, betas, tools, system segments, one
cumulative hash per message, the history check) and its break history.

Two kinds of session (``--messages``):

* ``0``: **the captured session**: Claude Code's three captured turns (fixtures 015-017 in
  ``tests/fixtures/real-clients/``: six messages, 24 tools, three breakpoints) replayed in order;
* ``N``: the captured first turn (:mod:`bench.cc_session`) grown with tool turns to at
  least ``N`` messages, sent as the session's request (what a session keeps after its last turn:
  the hashes of that request, whatever came before).

Reported: traced bytes still allocated once every session is stored, divided by the number of
sessions (shared values, such as the latch sets and the tools' hash, are counted once, as they are
kept once). Requests are parsed once per kind and reused (the cache step copies what it changes
and the store keeps hashes, never a part of a body), so only what the store keeps is measured.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import time
import tracemalloc
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson

from bench.cc_session import FIXTURES_DIR, SESSION_HEADER, CapturedRequest, ClaudeCodeSession
from gateway.cache.budget import DEFAULT_SESSION_MAX, SESSION_BYTES_ALLOWANCE, SESSION_MEMORY_BUDGET
from gateway.cache.pipeline import CachePipeline
from gateway.cache.session_store import MemorySessionStore
from gateway.config import Settings
from gateway.keys import DEFAULT_TEAM
from gateway.providers.base import ClientRequest, Operation
from gateway.streaming.usage import Usage

CAPTURED_TURNS = ("015_cc_tool_bash_turn1", "016_cc_tool_bash_turn2", "017_cc_tool_bash_turn3")
FIRST = Usage(input_tokens=5, cache_write_5m_tokens=17_450)  # writes the cache: first_request
LATER = Usage(input_tokens=5, cache_read_input_tokens=17_450, cache_write_5m_tokens=1_200)


@dataclass(frozen=True, slots=True)
class Template:
    """One request of a session, parsed once: its bytes, body and headers (the session's id is
    put in at each use)."""

    raw: bytes
    payload: dict[str, object]
    headers: tuple[tuple[str, str], ...]

    def for_session(self, session_id: str, index: int) -> ClientRequest:
        headers = [(k, session_id if k.lower() == SESSION_HEADER.lower() else v) for k, v in self.headers]
        return ClientRequest(Operation.MESSAGES, self.raw, self.payload, headers, f"req-{index}")


@dataclass(frozen=True, slots=True)
class SessionMemory:
    sessions: int
    messages: int  # in each session's last request
    requests_per_session: int
    bytes_per_session: float
    seconds: float


def _template(headers: Sequence[tuple[str, str]], body: dict[str, object]) -> Template:
    raw = orjson.dumps(body)
    kept = tuple((k, v) for k, v in headers if k.lower() not in ("content-length", "x-api-key"))
    if not any(k.lower() == SESSION_HEADER.lower() for k, _ in kept):
        kept += ((SESSION_HEADER, ""),)
    return Template(raw, orjson.loads(raw), kept)


def captured_session() -> list[Template]:
    """Claude Code's three captured turns, as the client sent them."""
    turns = [CapturedRequest.load(FIXTURES_DIR / f"{name}.json") for name in CAPTURED_TURNS]
    return [_template(turn.headers, turn.body) for turn in turns]


def grown_session(messages: int) -> list[Template]:
    """The captured first turn grown with tool turns to at least ``messages`` messages."""
    session = ClaudeCodeSession.from_fixture()
    turn = 0
    while len(session.history) < messages:
        turn += 1
        tool_id = f"toolu_{turn:020d}"
        session.add_answer(
            [
                {"type": "text", "text": f"Let me look at step {turn} of the task."},
                {
                    "type": "tool_use",
                    "id": tool_id,
                    "name": "Bash",
                    "input": {"command": f"ls -la src/{turn}"},
                },
            ]
        )
        output = f"turn {turn}: drwxr-xr-x  5 user staff  160 Jan  1 12:00 src/module_{turn}.py\n"
        session.add_tool_results([(tool_id, output * (4 + (turn * 7919) % 36))])
    body = {**session.other_fields, **session.next_request()}
    return [_template(list(session.headers().items()), body)]


def _pipeline(store: MemorySessionStore) -> CachePipeline:
    settings = Settings.from_environ({"ANTHROPIC_API_KEY": "measurement"})
    return CachePipeline(settings.cache, "anthropic", store, on_break=lambda reason: None)


async def _fill(pipeline: CachePipeline, turns: Sequence[Template], sessions: int, first: int = 0) -> None:
    for number in range(first, first + sessions):
        session_id = str(uuid.UUID(int=number))
        for index, template in enumerate(turns):
            _, context = await pipeline.before(template.for_session(session_id, index), DEFAULT_TEAM)
            pipeline.after(context, FIRST if index == 0 else LATER, 200, "anthropic")


async def measure(sessions: int, messages: int = 0) -> SessionMemory:
    """Bytes per stored session: ``messages`` 0 for the captured session, else a grown one."""
    turns = captured_session() if messages == 0 else grown_session(messages)
    store = MemorySessionStore(sessions + 1, 3600.0)
    pipeline = _pipeline(store)
    await _fill(pipeline, turns, 1, first=sessions)  # caches and lazy imports warm, not counted
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        started = time.perf_counter()
        await _fill(pipeline, turns, sessions)
        elapsed = time.perf_counter() - started
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    if len(store) != sessions + 1:
        raise RuntimeError(f"the store kept {len(store)} sessions, not {sessions + 1}")
    count = len(orjson.loads(turns[-1].raw)["messages"])
    return SessionMemory(sessions, count, len(turns), (after - before) / sessions, elapsed)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.session_memory", description=__doc__)
    parser.add_argument("--sessions", type=int, default=20_000)
    parser.add_argument("--messages", default="0,24,50,200", help="comma-separated; 0: the captured session")
    parser.add_argument("--json", type=Path, help="write the figures here as JSON")
    args = parser.parse_args(argv)
    results = [asyncio.run(measure(args.sessions, int(m))) for m in args.messages.split(",")]
    print(
        f"budget {SESSION_MEMORY_BUDGET / 2**20:g} MiB, default GATEWAY_SESSION_MAX {DEFAULT_SESSION_MAX}: "
        f"{SESSION_BYTES_ALLOWANCE} bytes allowed per session"
    )
    for result in results:
        kind = "captured session" if result.requests_per_session > 1 else "grown session"
        print(
            f"{kind:16s} {result.messages:4d} messages: {result.bytes_per_session:7.0f} bytes/session "
            f"({result.sessions} sessions, {result.seconds:.1f}s)"
        )
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
