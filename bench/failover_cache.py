"""Cache economics of failover: Claude-Code-shaped sessions over two upstreams with a primary outage.

``python -m bench.failover_cache [--sessions 100] [--turns 30] [--json OUT]`` (``python -m bench
failover-cache`` runs the same).

Two first-party emulators (``primary`` and ``secondary``, each with its own prompt cache: the
emulator's cache model, on one manual clock) behind one in-process gateway with a
``GATEWAY_UPSTREAMS_FILE`` routing every model to ``[primary, secondary]``. ``--sessions`` sessions
(:class:`bench.cc_session.ClaudeCodeSession`, fixture 015: Claude Code's system blocks, 24 tools,
the moving message breakpoint, a tool call per turn) each send ``--turns`` streamed turns through
the real ``anthropic`` SDK, a round at a time (turn n of every session, 10 at once), the clock moving
``--round-seconds`` per round. During the middle third of the rounds the primary answers every
request with ``529 overloaded_error`` (an emulator standing fault); ``--blips N`` lets it answer
again for N single rounds spread through the outage (an unstable recovery).

Three runs, same sessions:

* **affinity** (the gateway's behaviour): a session moves once, to the secondary, and stays there
  (it would return only once its cache there had expired: ``affinity.return_after_s`` 300 s);
* **per-request failover** (the anchor's behaviour, fleet-gateway.md section 5): every request tries
  the primary first and moves on when it fails; no breaker, no same-upstream retries, no affinity
  (the same gateway with ``return_after_s: 0``, ``breaker.failures`` out of reach,
  ``same_upstream_retries: 0``);
* **no outage**: the affinity configuration without the fault.

Measured per run, from the usage the client received: uncached input, cache-read and cache-write
tokens (per upstream too: each emulator's cache is its own) and cost (the gateway's price table).
The **minimum** outage cost is one re-write per moved session: for each session that moved, the
tokens its move turn read from the cache in the no-outage run, re-written instead (write price
minus read price). Targets: affinity's cost increase over no outage <= 1.2x the minimum, and >= 3x
cheaper than per-request failover's increase.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import itertools
import json
import sys
import tempfile
import warnings
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic

from bench.cache_efficiency import _scripted_model, tool_order
from bench.cc_session import DEFAULT_FIXTURE, ClaudeCodeSession
from bench.cc_turn import stream_turn
from emulators import EmulatorConfig, ManualClock
from emulators.upstreams import emulated_upstream
from gateway.app import create_app
from gateway.config import Settings
from gateway.pricing import DEFAULT_TABLE
from gateway.process import running
from gateway.streaming.usage import Usage

CLIENT_KEY = "sk-bench-failover"
STORM = "fail_first=1000000000:529"
CONCURRENCY = 10
TARGET_OVER_MINIMUM = 1.2
TARGET_VS_PER_REQUEST = 3.0
RUNS = ("affinity", "per_request", "no_outage")


@dataclass
class RunResult:
    name: str
    input_tokens: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost: float = 0.0
    failed: int = 0
    by_upstream: dict[str, dict[str, int]] = field(default_factory=dict)
    served_by: dict[tuple[int, int], str] = field(default_factory=dict)  # (session, turn) -> upstream
    read: dict[tuple[int, int], int] = field(default_factory=dict)  # (session, turn) -> cache read
    moves: int = 0


def _sections(run: str) -> dict[str, Any]:
    if run == "per_request":
        return {
            "affinity": {"return_after_s": 0},
            "breaker": {"failures": 1_000_000},
            "failover": {"same_upstream_retries": 0},
        }
    return {"failover": {"same_upstream_retries": 0}}


@contextlib.asynccontextmanager
async def _fleet(run: str, workdir: Path, clock: ManualClock) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    config = EmulatorConfig(clock=clock)
    async with contextlib.AsyncExitStack() as stack:
        emulators = {}
        entries = []
        for name in ("primary", "secondary"):
            (workdir / name).mkdir(parents=True, exist_ok=True)
            upstream = await stack.enter_async_context(emulated_upstream("anthropic", workdir / name, config))
            emulators[name] = upstream.emulator
            entries.append(
                {
                    "name": name,
                    "provider": "anthropic",
                    "base_url": upstream.env["ANTHROPIC_BASE_URL"],
                    "credentials": {"ANTHROPIC_API_KEY": upstream.env["ANTHROPIC_API_KEY"]},
                }
            )
        path = workdir / f"upstreams-{run}.json"
        routes = [{"models": ["*"], "upstreams": ["primary", "secondary"]}]
        path.write_text(json.dumps({"upstreams": entries, "routes": routes, **_sections(run)}))
        settings = Settings.from_environ(
            {
                "GATEWAY_API_KEYS": CLIENT_KEY,
                "GATEWAY_UPSTREAMS_FILE": str(path),
                "GATEWAY_UPSTREAM_HEADER": "1",  # the bench counts which upstream answered
                "GATEWAY_LOG_LEVEL": "ERROR",
            }
        )
        app = create_app(settings, wall_clock=clock.time)
        server = await stack.enter_async_context(running(app, "127.0.0.1", 0))
        yield server.base_url, emulators


def _session(i: int, fixture: Path) -> ClaudeCodeSession:
    """Session ``i``: Claude Code's system and tools (shared by every session, as one Claude Code
    version sends them), a first user message of its own (so its history is its own)."""
    session = ClaudeCodeSession.from_fixture(fixture)
    first = session.history[0]
    content = (
        first["content"]
        if isinstance(first.get("content"), list)
        else [{"type": "text", "text": first["content"]}]
    )
    first["content"] = [{"type": "text", "text": f"Task {i}: work on module {i} of the project."}, *content]
    return session


def outage_rounds(turns: int, blips: int) -> set[int]:
    """The rounds the primary is down: the middle third, less ``blips`` single rounds spread evenly
    through it where it answers again before failing anew (an unstable recovery)."""
    first, last = turns // 3 + 1, 2 * turns // 3
    down = set(range(first, last + 1))
    span = last - first + 1
    for k in range(1, blips + 1):
        down.discard(first + k * span // (blips + 1))
    return down


async def run_once(
    run: str, sessions: int, turns: int, round_s: float, fixture: Path, blips: int = 0
) -> RunResult:
    clock = ManualClock()
    result = RunResult(run)
    outage = outage_rounds(turns, blips)
    with tempfile.TemporaryDirectory() as directory:
        async with _fleet(run, Path(directory), clock) as (url, emulators):
            states = [(s, tool_order(s)) for s in (_session(i, fixture) for i in range(sessions))]
            client = anthropic.AsyncAnthropic(api_key=CLIENT_KEY, base_url=url, max_retries=0)
            gate = asyncio.Semaphore(CONCURRENCY)

            async def turn(i: int, n: int) -> None:
                session, order = states[i]
                _, emulator_headers = _scripted_model(session, order)
                headers = session.headers([], emulator_headers)
                headers["X-Claude-Code-Session-Id"] = f"bench-failover-{i:04d}"
                async with gate:
                    try:
                        final, answered = await stream_turn(client, session, session.model, headers)
                        upstream = answered.get("x-gateway-upstream", "?")
                    except anthropic.APIError:
                        result.failed += 1
                        return
                usage = Usage()
                usage.update(final.usage.model_dump())
                result.input_tokens += usage.input_tokens
                result.cache_read += usage.cache_read_input_tokens
                result.cache_write += usage.cache_creation_input_tokens
                result.cost += DEFAULT_TABLE.cost("anthropic", session.model, usage).total
                result.read[(i, n)] = usage.cache_read_input_tokens
                result.served_by[(i, n)] = upstream
                counts = result.by_upstream.setdefault(
                    upstream, {"requests": 0, "cache_read": 0, "cache_write": 0}
                )
                counts["requests"] += 1
                counts["cache_read"] += usage.cache_read_input_tokens
                counts["cache_write"] += usage.cache_creation_input_tokens
                tool_uses = session.add_answer([b.model_dump() for b in final.content])
                if tool_uses:
                    session.add_tool_results(
                        [(str(u["id"]), f"{u['name']} ok (turn {n})") for u in tool_uses]
                    )
                else:
                    session.add_prompt(f"Thanks. Next, check step {n + 1} of the plan.")

            for n in range(1, turns + 1):
                down = run != "no_outage" and n in outage
                emulators["primary"].set_fault(STORM if down else "")
                await asyncio.gather(*(turn(i, n) for i in range(sessions)))
                clock.advance(round_s)
            await client.close()
            for i in range(sessions):
                placed = [result.served_by.get((i, n)) for n in range(1, turns + 1)]
                result.moves += sum(1 for a, b in itertools.pairwise(placed) if a and b and a != b)
    return result


def _price(model: str, kind: str) -> float:
    """The price of one token of ``kind`` (the gateway's table, priced on a one-token usage)."""
    usage = Usage()
    usage.update(
        {"cache_read": {"cache_read_input_tokens": 1}, "cache_write": {"cache_creation_input_tokens": 1}}[
            kind
        ]
    )
    return DEFAULT_TABLE.cost("anthropic", model, usage).total


def minimum_increase(baseline: RunResult, moved: RunResult, model: str) -> float:
    """One re-write per moved session, priced as written instead of read: at its first turn away
    from the primary, what the no-outage run read from the cache at that turn. The part every
    session shares (Claude Code's system and tools: what a session's first turn can read, the
    largest first-turn read of the no-outage run) is counted once, as the first moved session
    writes it for all."""
    write_minus_read = _price(model, "cache_write") - _price(model, "cache_read")
    shared = max((tokens for (_, n), tokens in baseline.read.items() if n == 1), default=0)
    extra_tokens = shared
    for (i, n), upstream in sorted(moved.served_by.items()):
        if upstream != "primary" and all(moved.served_by.get((i, m)) == "primary" for m in range(1, n)):
            extra_tokens += max(0, baseline.read.get((i, n), 0) - shared)
    return extra_tokens * write_minus_read


def report(results: Mapping[str, RunResult], minimum: float) -> dict[str, Any]:
    base = results["no_outage"].cost
    ours = results["affinity"].cost - base
    anchor = results["per_request"].cost - base
    over_minimum = ours / minimum if minimum > 0 else None
    versus = anchor / ours if ours > 0 else None
    return {
        "passed": {
            "affinity_over_minimum": over_minimum is not None and over_minimum <= TARGET_OVER_MINIMUM,
            "per_request_over_affinity": versus is not None and versus >= TARGET_VS_PER_REQUEST,
            "no_request_lost": all(r.failed == 0 for r in results.values()),
        },
        "runs": {
            name: dataclasses.asdict(r) | {"served_by": None, "read": None} for name, r in results.items()
        },
        "increase_affinity_usd": ours,
        "increase_per_request_usd": anchor,
        "minimum_increase_usd": minimum,
        "affinity_over_minimum": over_minimum,
        "per_request_over_affinity": versus,
        "targets": {
            "affinity_over_minimum_max": TARGET_OVER_MINIMUM,
            "per_request_over_affinity_min": TARGET_VS_PER_REQUEST,
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.failover_cache", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--round-seconds", type=float, default=30.0)
    parser.add_argument("--fixture", type=Path, default=DEFAULT_FIXTURE)
    parser.add_argument(
        "--blips",
        type=int,
        default=0,
        help="single rounds the primary answers again during its outage (default 0)",
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", category=DeprecationWarning)

    async def all_runs() -> dict[str, RunResult]:
        return {
            run: await run_once(run, args.sessions, args.turns, args.round_seconds, args.fixture, args.blips)
            for run in RUNS
        }

    results = asyncio.run(all_runs())
    model = ClaudeCodeSession.from_fixture(args.fixture).model
    summary = report(results, minimum_increase(results["no_outage"], results["affinity"], model))
    print(json.dumps(summary, indent=2, default=str))
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=2, default=str))
    return 0 if all(summary["passed"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
