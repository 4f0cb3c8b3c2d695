"""``python -m bench.demo`` (``make demo``): the gateway in front of the emulator, driven by the official SDK.

Starts the first-party emulator and the gateway on free loopback ports, then runs a tool-using,
multi-turn conversation shaped like Claude Code's (a large static system prompt and a dynamic one,
each a cache breakpoint, plus a breakpoint that moves to the newest user block every turn). Prints
one row per model turn (input, cache read, cache write, output tokens and latency), the gateway's
own token counters, and exits non-zero if the conversation did not behave (no tool round trip, or
a turn after the first that read nothing from the cache).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import anthropic

from emulators.upstreams import emulated_upstream
from gateway.app import create_app
from gateway.config import Settings
from gateway.metrics import GatewayMetrics
from gateway.process import new_event_loop, running

if TYPE_CHECKING:
    from loop.demo import AgentDemoResult

CLIENT_KEY = "sk-demo-client"
MODEL = "claude-sonnet-4-6"  # served by all four upstreams' catalogues; the SDK warns 4.5 is past end-of-life

# A small in-memory project the demo's tools read from.
PROJECT = {
    "README.md": "# inventory\nA tiny inventory service. Run `make test`.\n",
    "inventory/stock.py": (
        "def reserve(stock: dict[str, int], sku: str, n: int) -> bool:\n"
        "    if stock.get(sku, 0) < n:\n        return False\n    stock[sku] -= n\n    return True\n"
    ),
    "tests/test_stock.py": "from inventory.stock import reserve\n\ndef test_reserve():\n    ...\n",
}

TOOLS: list[dict[str, Any]] = [
    {
        "name": "list_directory",
        "description": "List the files of the project under a directory.",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string", "description": "directory, '.' for the root"}},
            "required": ["path"],
        },
    },
    {
        "name": "read_file",
        "description": "Read a file of the project.",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string", "description": "file path"}},
            "required": ["path"],
        },
    },
]

_GUIDELINES = (
    "Prefer small, reviewable changes. Read the code before changing it. Keep functions short and "
    "named for what they do. Run the tests after every change and report what they printed. "
)
STATIC_SYSTEM = "You are a careful software engineering agent.\n" + _GUIDELINES * 60
DYNAMIC_SYSTEM = "Environment: working directory /srv/inventory; platform linux; date 2026-11-30."

EPHEMERAL: dict[str, str] = {"type": "ephemeral"}


def run_tool(name: str, tool_input: dict[str, Any]) -> str:
    path = str(tool_input.get("path", "."))
    if name == "list_directory":
        prefix = "" if path in (".", "", "/") else path.rstrip("/") + "/"
        return "\n".join(sorted(p for p in PROJECT if p.startswith(prefix))) or "(empty)"
    if name == "read_file":
        return PROJECT.get(path, f"error: no such file: {path}")
    return f"error: unknown tool {name}"


@dataclass
class TurnRow:
    turn: int
    stop_reason: str
    input_tokens: int
    cache_read: int
    cache_write: int
    output_tokens: int
    latency_ms: float


def _with_breakpoint_on_last_block(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Claude Code's scheme: only the newest user block carries the message breakpoint."""
    out: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        content = message["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        blocks = [{k: v for k, v in block.items() if k != "cache_control"} for block in content]
        if index == len(messages) - 1 and message["role"] == "user":
            blocks[-1] = {**blocks[-1], "cache_control": EPHEMERAL}
        out.append({"role": message["role"], "content": blocks})
    return out


async def _converse(
    client: anthropic.AsyncAnthropic, prompts: list[str], max_turns: int, clock: Callable[[], float]
) -> list[TurnRow]:
    system = [
        {"type": "text", "text": STATIC_SYSTEM, "cache_control": EPHEMERAL},
        {"type": "text", "text": DYNAMIC_SYSTEM, "cache_control": EPHEMERAL},
    ]
    messages: list[dict[str, Any]] = []
    rows: list[TurnRow] = []
    pending = list(prompts)
    while len(rows) < max_turns:
        if not messages or messages[-1]["role"] == "assistant":
            if not pending:
                break
            messages.append({"role": "user", "content": pending.pop(0)})
        started = clock()
        async with client.messages.stream(
            model=MODEL,
            max_tokens=1024,
            system=system,  # type: ignore[arg-type]
            tools=TOOLS,  # type: ignore[arg-type]
            messages=_with_breakpoint_on_last_block(messages),  # type: ignore[arg-type]
        ) as stream:
            final = await stream.get_final_message()
        usage = final.usage
        rows.append(
            TurnRow(
                turn=len(rows) + 1,
                stop_reason=str(final.stop_reason),
                input_tokens=usage.input_tokens,
                cache_read=usage.cache_read_input_tokens or 0,
                cache_write=usage.cache_creation_input_tokens or 0,
                output_tokens=usage.output_tokens,
                latency_ms=(clock() - started) * 1000,
            )
        )
        messages.append(
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in final.content]}
        )
        if final.stop_reason == "tool_use":
            results = [
                {"type": "tool_result", "tool_use_id": block.id, "content": run_tool(block.name, block.input)}
                for block in final.content
                if block.type == "tool_use"
            ]
            messages.append({"role": "user", "content": results})
    return rows


def _print_table(rows: list[TurnRow], out: TextIO) -> None:
    header = f"{'turn':>4}  {'stop_reason':<11}  {'input':>6}  {'cache_read':>10}  {'cache_write':>11}  {'output':>6}  {'latency_ms':>10}"
    print(header, file=out)
    print("-" * len(header), file=out)
    for r in rows:
        print(
            f"{r.turn:>4}  {r.stop_reason:<11}  {r.input_tokens:>6}  {r.cache_read:>10}  {r.cache_write:>11}  "
            f"{r.output_tokens:>6}  {r.latency_ms:>10.1f}",
            file=out,
        )
    total_in = sum(r.input_tokens + r.cache_read + r.cache_write for r in rows)
    cached = sum(r.cache_read for r in rows)
    share = cached / total_in if total_in else 0.0
    print(f"\ninput tokens served from cache: {cached} of {total_in} ({share:.0%})", file=out)


async def _demo(turns: int, out: TextIO, provider: str) -> int:
    metrics = GatewayMetrics()
    with tempfile.TemporaryDirectory(prefix="switchyard-demo-") as workdir:
        async with emulated_upstream(provider, Path(workdir)) as upstream:
            # the cloud SDKs (botocore, google-auth) read their credentials from the process
            # environment when the provider is built: give them the emulator's fixture ones
            saved = {name: os.environ.get(name) for name in upstream.process_env}
            os.environ.update(upstream.process_env)
            try:
                settings = Settings.from_environ({"GATEWAY_API_KEYS": CLIENT_KEY, **upstream.env})
                return await _drive(settings, metrics, upstream.emulator.base_url, provider, turns, out)
            finally:
                for name, value in saved.items():
                    if value is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = value


async def _drive(
    settings: Settings, metrics: GatewayMetrics, upstream_url: str, provider: str, turns: int, out: TextIO
) -> int:
    async with running(create_app(settings, metrics=metrics), "127.0.0.1", 0) as gateway:
        print(f"emulator ({provider}) on {upstream_url}", file=out)
        print(f"gateway on {gateway.base_url}  ->  upstream {upstream_url}\n", file=out)
        client = anthropic.AsyncAnthropic(api_key=CLIENT_KEY, base_url=gateway.base_url, max_retries=2)
        prompts = [
            "Find where stock is reserved and explain the check. "
            "[[scenario:agent]] [[tools:list_directory,read_file]]",
            "Thanks. Summarise the project in one sentence.",
        ]
        rows = await _converse(client, prompts, turns, time.perf_counter)
        await client.close()
        _print_table(rows, out)
        agent = await _agent_run(gateway.base_url, out)
        token_lines = [
            line
            for line in metrics.exposition().decode().splitlines()
            if line.startswith(("gateway_tokens_total", "gateway_requests_total"))
        ]
        print("\ngateway metrics (GET /metrics with a metrics key):", file=out)
        for line in token_lines:
            print("  " + line, file=out)
        print(
            "\nRun it yourself: `switchyard serve` with GATEWAY_API_KEYS and ANTHROPIC_API_KEY set, then\n"
            "ANTHROPIC_BASE_URL=http://127.0.0.1:8080 ANTHROPIC_API_KEY=<gateway key> <your client>;\n"
            "metrics at http://127.0.0.1:8080/metrics with a key of GATEWAY_METRICS_API_KEYS.",
            file=out,
        )
    return _verdict(rows, agent, out)


async def _agent_run(gateway_url: str, out: TextIO) -> AgentDemoResult:
    """The loop/ library's agent through the same gateway: reads a file, edits it, finishes."""
    from loop.demo import run_agent_demo

    print("\nagent loop (loop/) through the gateway: read a file, edit it, finish", file=out)
    result = await run_agent_demo(gateway_url, CLIENT_KEY, model=MODEL)
    print(result.table(), file=out)
    print(f"terminal: {type(result.terminal).__name__}; file edited: {result.edited}", file=out)
    return result


def _verdict(rows: list[TurnRow], agent: AgentDemoResult, out: TextIO) -> int:
    from loop import Completed

    problems = []
    if not isinstance(agent.terminal, Completed) or not agent.edited:
        problems.append(f"the agent run ended with {type(agent.terminal).__name__}")
    if not any(r.stop_reason == "tool_use" for r in rows):
        problems.append("the model never called a tool")
    if rows and rows[-1].stop_reason != "end_turn":
        problems.append(f"the last turn stopped with {rows[-1].stop_reason}")
    if any(r.cache_read == 0 for r in rows[1:]):
        problems.append("a turn after the first read nothing from the prompt cache")
    for problem in problems:
        print(f"demo: FAILED: {problem}", file=out)
    if not problems:
        print("\ndemo: OK", file=out)
    return 1 if problems else 0


def run_demo(turns: int = 4, out: TextIO = sys.stdout, provider: str = "anthropic") -> int:
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(_demo(turns, out, provider))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.demo",
        description="Run the gateway against an emulator and drive a conversation.",
    )
    parser.add_argument("--turns", type=int, default=4, help="conversation turns to drive")
    parser.add_argument(
        "--provider",
        default="anthropic",
        choices=["anthropic", "bedrock", "vertex", "foundry"],
        help="which upstream the gateway is configured for (each against its emulator)",
    )
    args = parser.parse_args(argv)
    return run_demo(turns=args.turns, provider=args.provider)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
