"""A long agent session with and without the context layers: what they cost and what they save.

``python -m bench.context_session [--calls 200] [--json OUT]``

The loop (``loop.query``, the official SDK as its model caller) against the first-party emulator in
this process: its scripted ``agent`` model, its token rule and its prompt-cache model (5-minute
TTL; the session runs in well under that). The system prompt is the loop's ``AgentPrompt`` (a
static part and the session's part, each with a breakpoint; the loop adds one on the newest
message). A session is user prompts, each asking for ``TOOLS_PER_PROMPT`` read-only tool calls in
order (about 2.8 kB of result each, ~720 tokens of history per call) and then an answer, run one
after another in one ``ContextSession`` (each prompt a new ``query()`` on the history so far) until
``--calls`` model calls were made. Guardrails are raised for it (no turn, token or wall-clock
limit). Configurations:

* ``no_layers``: ``ContextConfig(enabled=False)``, a 200,000-token window: the history grows to
  about 150,000 tokens by call 200;
* ``layers``: the defaults, 200,000-token window (client-side microcompact: the emulator does not
  apply server-side context edits; snip at 150 turns);
* ``layers_64k``: the defaults with a 64,000-token window;
* ``summary_64k``: a 64,000-token window kept by auto-compaction alone (microcompact and collapse
  off): the summarisation calls and what they cost.

Figures (:mod:`bench.context_report`): model calls, billed input tokens, cache-read share,
peak context tokens, cost (first-party prices) in total, of calls 20 and 200 and on average over
calls 11-20 and 191-200 (one call's cost swings with a cache write), the CPU the
context layers take per call, and whole context passes (``ContextPipeline.run``: layers 0-4,
thinking rules, normaliser, estimate) timed offline over the ``no_layers`` run's final history
(~150,000 tokens) with the default layers: the issue-14 target is p99 < 5 ms. Nothing is
asserted; the machine's other load shows in the CPU figures.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

import loop
from bench.context_report import ConfigResult, render
from emulators import EmulatorConfig, run_emulator
from loop.callers import SdkModelCaller
from loop.context.layers import DEFAULT_LAYERS, ContextLayer
from loop.context.pipeline import ContextPipeline, Prepared
from loop.context.result import LayerResult
from loop.context.settings import ContextSettings, LayerState
from loop.deps import ModelStreamItem, SystemClock, new_request_id
from loop.messages import Message, user_message
from loop.request import ModelRequest, system_blocks
from loop.testing import FakeTool
from loop.tokens import estimate_json_tokens
from loop.tools.registry import ToolRegistry

MODEL = "claude-sonnet-4-6"
KEY = "sk-bench-context"
TOOLS_PER_PROMPT = 19
RESULT_LINES = 47
TARGET_P99_MS = 5.0
OFFLINE_PASSES = 200
RAISED = {"max_turns": 100_000, "max_total_tokens": None, "max_wall_clock_s": None}
CONFIGS: dict[str, tuple[str, loop.LoopConfig]] = {
    "no_layers": (
        "no context layers, 200k window",
        loop.LoopConfig(model=MODEL, context=loop.ContextConfig(enabled=False), **RAISED),  # type: ignore[arg-type]
    ),
    "layers": (
        "default layers, 200k window",
        loop.LoopConfig(model=MODEL, context=loop.ContextConfig(server_context_edits=False), **RAISED),  # type: ignore[arg-type]
    ),
    "layers_64k": (
        "default layers, 64k window",
        loop.LoopConfig(
            model=MODEL,
            context_window=64_000,
            context=loop.ContextConfig(server_context_edits=False),
            **RAISED,  # type: ignore[arg-type]
        ),
    ),
    "summary_64k": (
        "auto-compaction alone (no microcompact, no collapse), 64k window",
        loop.LoopConfig(
            model=MODEL,
            context_window=64_000,
            context=loop.ContextConfig(collapse=False, microcompact_keep_results=1_000_000),
            **RAISED,  # type: ignore[arg-type]
        ),
    ),
}


def prompt_text(number: int) -> str:
    names = ",".join(f"step_{i:02d}" for i in range(1, TOOLS_PER_PROMPT + 1))
    return f"[[scenario:agent]] [[tools:{names}]] Request {number}: run every step in order and report."


def bench_tools() -> list[FakeTool]:
    """Read-only tools whose results look like source files: different on every call."""
    counter = iter(range(1_000_000))

    def result(name: str) -> Any:
        def produce(_input: dict[str, Any]) -> str:
            n = next(counter)
            lines = (
                f"{i:4d}  def {name}_{n}_{i}(value):  return transform(value, {n * i % 997})"
                for i in range(RESULT_LINES)
            )
            return f"# {name}, call {n}\n" + "\n".join(lines)

        return produce

    return [FakeTool(f"step_{i:02d}", result=result(f"step_{i:02d}")) for i in range(1, TOOLS_PER_PROMPT + 1)]


class LayerTimer:
    """Wraps the pure layers (0-3); one entry per context pass: the process time they took."""

    def __init__(self) -> None:
        self.passes: list[float] = []

    def wrap(self, layers: Sequence[ContextLayer]) -> tuple[ContextLayer, ...]:
        def timed(layer: ContextLayer, first: bool) -> ContextLayer:
            def run(
                messages: tuple[Message, ...], state: LayerState, settings: ContextSettings
            ) -> LayerResult:
                started = time.process_time()
                result = layer(messages, state, settings)
                elapsed = time.process_time() - started
                if first:
                    self.passes.append(elapsed)
                else:
                    self.passes[-1] += elapsed
                return result

            return run

        return tuple(timed(layer, i == 0) for i, layer in enumerate(layers))


async def run_config(name: str, calls: int, base_url: str, workdir: Path) -> tuple[ConfigResult, loop.Run]:
    description, config = CONFIGS[name]
    result = ConfigResult(name, description, MODEL)
    timer = LayerTimer()
    session = loop.ContextSession()
    tools = bench_tools()
    prompt = loop.AgentPrompt(workdir, MODEL, date="2026-01-01")
    history: list[Message] = []
    last: loop.Run | None = None
    async with SdkModelCaller(base_url, KEY, max_retries=0) as caller:
        number = 0
        while len(result.calls) < calls:
            number += 1
            run = loop.query(
                loop.QueryParams(
                    [*history, user_message(prompt_text(number))],
                    system=prompt,
                    tools=tools,
                    config=replace(config, max_turns=calls - len(result.calls)),
                    deps=loop.LoopDeps(call_model=caller, layers=timer.wrap(DEFAULT_LAYERS)),
                    session=session,
                )
            )
            before = len(result.calls)
            async for event in run:
                _book(result, event)
            result.terminals.append(run.terminal.reason)
            if len(result.calls) == before:  # the session cannot go on (e.g. a blocking limit)
                break
            history, last = run.messages, run
    result.layer_cpu_s = timer.passes if config.context.enabled else []
    result.history_tokens = result.calls[-1].context_tokens if result.calls else 0
    assert last is not None
    return result, last


def _book(result: ConfigResult, event: loop.LoopEvent) -> None:
    if isinstance(event, loop.AssistantMessage):
        result.calls.append(event.usage)
    elif isinstance(event, loop.Compaction):
        key = f"{event.layer.value}/{event.outcome.value}"
        result.compactions[key] = result.compactions.get(key, 0) + 1
        if event.usage is not None:
            result.summaries.append(event.usage)
    elif isinstance(event, loop.ContextBoundary):
        key = f"{event.layer.value}/applied"
        result.compactions[key] = result.compactions.get(key, 0) + 1


class _NoModel:
    """The offline passes' model caller: a pass that tries to summarise is a bench error."""

    def __init__(self) -> None:
        self.called = False

    def __call__(self, request: ModelRequest) -> AsyncIterator[ModelStreamItem]:
        self.called = True
        raise RuntimeError("the offline context pass called the model (a summarisation was due)")


async def offline_passes(state: loop.LoopState, workdir: Path, repetitions: int) -> list[float]:
    """Whole context passes (the default layers, a 200k window) over ``state``'s history, each
    from the same state: milliseconds of process time each."""
    config = CONFIGS["layers"][1]
    tools = bench_tools()
    definitions = ToolRegistry(tools).definitions()
    system = await loop.AgentPrompt(workdir, MODEL, date="2026-01-01").assemble(
        loop.ContextSession().sections, "anthropic"
    )
    overhead = estimate_json_tokens([*system_blocks(system.blocks, cache=False), *definitions])
    settings = ContextSettings(
        config.context,
        config.effective_window,
        config.blocking_buffer_tokens,
        {tool.name: tool.max_result_size_chars for tool in tools},
        overhead_tokens=overhead,
    )
    timings: list[float] = []
    model = _NoModel()
    for _ in range(repetitions):
        pipeline = ContextPipeline(
            settings,
            config,
            session=loop.ContextSession(),
            caller=model,
            clock=SystemClock(),
            uuid=new_request_id,
            layers=DEFAULT_LAYERS,
        )
        started = time.process_time()
        async for step in pipeline.run(state):
            if isinstance(step, Prepared):
                break
        timings.append((time.process_time() - started) * 1000)
    if model.called:
        raise RuntimeError("the offline context pass called the model (a summarisation was due)")
    return timings


async def run(calls: int, names: Sequence[str], workdir: Path) -> list[ConfigResult]:
    results: list[ConfigResult] = []
    async with run_emulator(EmulatorConfig(api_keys=frozenset({KEY}))) as emulator:
        for name in names:
            result, last = await run_config(name, calls, emulator.base_url, workdir)
            if name == "no_layers":
                result.pass_history_tokens = last.state.context_tokens
                result.pass_ms = await offline_passes(last.state, workdir, OFFLINE_PASSES)
            results.append(result)
    return results


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=200, help="model calls per configuration (default 200)")
    parser.add_argument(
        "--configs", default=",".join(CONFIGS), help=f"comma list of {', '.join(CONFIGS)} (default: all)"
    )
    parser.add_argument("--json", dest="json_out", help="write every figure (and per-call usage) here")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    names = [n.strip() for n in args.configs.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown or args.calls < 1:
        print(f"unknown configuration(s) {unknown} or --calls < 1", file=sys.stderr)
        return 2
    started = time.monotonic()
    results = asyncio.run(run(args.calls, names, Path("/bench/workspace")))
    print(render(results, TARGET_P99_MS))
    print(f"({time.monotonic() - started:.0f} s; CPU figures are process time on a shared, noisy machine)")
    if args.json_out:
        payload = {
            "calls": args.calls,
            "target_p99_ms": TARGET_P99_MS,
            "configs": [r.as_dict() for r in results],
        }
        Path(args.json_out).write_bytes(orjson.dumps(payload, option=orjson.OPT_INDENT_2))
        print(f"results written to {args.json_out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
