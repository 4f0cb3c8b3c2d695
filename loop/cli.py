"""``switchyard agent "task" --workspace DIR``: a headless agent with the built-in file tools.

Exits 0 iff the run completed (3 when a tool call was refused in a non-interactive run). Printing
belongs to :mod:`loop.cli_output`, non-interactive permissions to :mod:`loop.headless`; the
options are listed in the design document.

Details: docs/internals/loop.md
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import orjson

from gateway.config import ConfigError
from gateway.loop_metrics import LoopMetrics, serving
from loop import headless
from loop.cli_output import JsonPrinter, TextPrinter, event_json
from loop.config import DEFAULT_MODEL, LoopConfig
from loop.context.session import ContextSession
from loop.deps import LoopDeps, ModelCaller
from loop.hooks import HookSettings, load_hooks
from loop.observer import RunObserver
from loop.query import QueryParams, query
from loop.subagents import SubagentConfig
from loop.subagents.agents_file import load_agents
from loop.subagents.definition import DEFAULT_MAX_CONCURRENT
from loop.system_prompt import AgentPrompt
from loop.tools.base import Tool
from loop.tools.builtin import builtin_tools
from loop.tools.permissions import PermissionMode, PermissionRequest, PermissionVerdict
from loop.transitions import Completed, PermissionDenied

if TYPE_CHECKING:
    from loop.mcp import ServerFailure

__all__ = ["build_parser", "event_json", "loop_config", "main"]  # event_json: loop.cli_output's

EXIT_COMPLETED = 0
EXIT_STOPPED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

METRICS_HOST = "127.0.0.1"
DEFAULTS = LoopConfig()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="switchyard agent",
        description="Run a headless agent on a task.",
        epilog=headless.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("task", help="what the agent should do")
    parser.add_argument(
        "--workspace", required=True, type=Path, help="directory the file tools are confined to"
    )
    parser.add_argument(
        "--permission-mode",
        default=PermissionMode.ACCEPT_EDITS.value,
        choices=[m.value for m in PermissionMode],
        help="who may approve state-changing tool calls (default: acceptEdits)",
    )
    parser.add_argument(
        "--max-turns",
        type=int,
        default=DEFAULTS.max_turns,
        help="model calls at most (default %(default)s); every request counts, retries and "
        "continuations included; summarisation calls of the context layers do not (the auto-compact "
        "circuit breaker bounds them)",
    )
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument(
        "--context-window",
        type=int,
        default=DEFAULTS.context_window,
        help="the model's context window in tokens (default %(default)s): the context layers keep "
        "the prompt under it",
    )
    parser.add_argument(
        "--max-output-tokens",
        type=int,
        default=DEFAULTS.escalated_max_tokens,
        help="output cap of a retried truncated response (default %(default)s; a request asks for "
        f"at most {DEFAULTS.max_tokens} first); min(this, 20000) is kept free of the window",
    )
    parser.add_argument(
        "--max-tokens-total",
        type=int,
        default=DEFAULTS.max_total_tokens,
        help="billed tokens per run: uncached input + cache writes + output, summarisation calls "
        "included, cache reads not (default %(default)s; 0: no limit)",
    )
    parser.add_argument(
        "--max-wall-clock",
        type=float,
        default=DEFAULTS.max_wall_clock_s,
        help="seconds per run (default %(default)s; 0: no limit)",
    )
    parser.add_argument(
        "--thinking-budget",
        type=int,
        help="enable extended thinking with this budget (>= 1024 tokens); off by default",
    )
    parser.add_argument(
        "--budget",
        type=int,
        metavar="TOKENS",
        help="output-token budget of the run: when the agent ends its turn below 90%% of it, it is told "
        "how much is left and goes on, until it reaches 90%% or its continuations dwindle (two in a row "
        "under 500 tokens after the third); off by default",
    )
    parser.add_argument(
        "--max-budget-usd",
        type=float,
        metavar="USD",
        help="cost limit of the run in US dollars: every model call (summaries, hook judges and "
        "sub-agents included) is priced with the gateway's price table; the run stops with the "
        "'cost' guardrail once it reached it; off by default",
    )
    parser.add_argument(
        "--fallback-model",
        metavar="MODEL",
        help="after 3 overloads in a row (529 or overloaded_error, also mid-stream) the run switches "
        "to this model for the rest of the run; one model",
    )
    parser.add_argument(
        "--agents",
        metavar="JSON_OR_FILE",
        help='sub-agents the agent may start with its "agent" tool, as Claude Code\'s --agents: a JSON '
        'object or a file holding one, {"NAME": {"description": "...", "prompt": "system prompt", '
        '"tools": [...], "disallowedTools": [...], "model": "MODEL|opus|sonnet|haiku|inherit", '
        '"maxTurns": N, "permissionMode": "bubble"}}; tools default to all of the run\'s; a child\'s '
        "permission questions go to this run; it draws from this run's token, cost and time limits",
    )
    parser.add_argument(
        "--max-subagents",
        type=int,
        default=DEFAULT_MAX_CONCURRENT,
        metavar="N",
        help="sub-agents running at once (default %(default)s; more wait); with --agents",
    )
    parser.add_argument(
        "--hooks",
        type=Path,
        metavar="FILE",
        help='hooks in Claude Code\'s settings shape: {"hooks": {"PreToolUse": [{"matcher": "<tool regex>", '
        '"hooks": [{"type": "command", "command": "...", "timeout": SECONDS}]}], "Stop": [...], ...}}; '
        "events PreToolUse, PostToolUse, UserPromptSubmit, Stop, SessionStart, SessionEnd, PreCompact, "
        "SubagentStart, SubagentStop (tool hooks run in sub-agents too); "
        "types command, http, prompt, agent, python. A command gets the event as JSON on stdin and runs "
        "in the workspace; exit code 2 blocks (a tool call, the prompt, or the agent's stop) with its "
        "stderr as the reason, 0 passes (stdout may be a JSON answer), anything else is logged",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        help=f"serve the loop_* Prometheus metrics on http://{METRICS_HOST}:PORT/metrics while the "
        "agent runs (0: a free port, printed on stderr)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per event on stdout")
    parser.add_argument("--base-url", help="an Anthropic-compatible URL, used through the official SDK")
    parser.add_argument("--api-key", help="API key for --base-url")
    headless.add_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.base_url and not args.api_key:
        parser.error("--base-url needs --api-key")
    if args.base_url and (missing := _missing_sdk()) is not None:
        print(f"switchyard agent: --base-url: {missing}", file=sys.stderr)
        return EXIT_USAGE
    if not args.workspace.is_dir():
        parser.error(f"--workspace: not a directory: {args.workspace}")
    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
        parser.error("--metrics-port must be between 0 and 65535")
    try:
        config = loop_config(args)
        hooks = _hooks(args)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        return asyncio.run(_run(args, config, sys.stdout, hooks))
    except ConfigError as exc:
        print(f"switchyard agent: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _missing_sdk() -> str | None:
    """Why ``--base-url`` cannot run (the SDK caller's message naming the extra), or None."""
    try:
        import loop.callers.sdk  # noqa: F401 - the official SDK, the ``sdk`` extra
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != "anthropic":
            raise
        return str(exc)
    return None


def loop_config(args: argparse.Namespace) -> LoopConfig:
    """The run's ``LoopConfig`` from the options (``ValueError`` names the option at fault)."""
    if args.max_turns < 1:
        raise ValueError("--max-turns must be >= 1")
    if args.max_output_tokens < 1:
        raise ValueError("--max-output-tokens must be >= 1")
    if args.max_tokens_total is not None and args.max_tokens_total < 0:
        raise ValueError("--max-tokens-total must be >= 0")
    if args.max_wall_clock is not None and args.max_wall_clock < 0:
        raise ValueError("--max-wall-clock must be >= 0")
    if args.budget is not None and args.budget < 1:
        raise ValueError("--budget must be >= 1")
    if args.max_budget_usd is not None and not args.max_budget_usd > 0:
        raise ValueError("--max-budget-usd must be a number greater than 0")
    if args.fallback_model is not None and ("," in args.fallback_model or not args.fallback_model.strip()):
        raise ValueError("--fallback-model takes one model")
    if args.max_subagents < 1:
        raise ValueError("--max-subagents must be >= 1")
    budget = args.thinking_budget
    max_tokens = min(DEFAULTS.max_tokens, args.max_output_tokens)
    if budget is not None:
        if budget < 1024:
            raise ValueError("--thinking-budget must be >= 1024")
        if budget >= args.max_output_tokens:
            raise ValueError("--thinking-budget must be below --max-output-tokens")
        max_tokens = max(max_tokens, min(args.max_output_tokens, budget + DEFAULTS.max_tokens))
    effective = args.context_window - min(args.max_output_tokens, 20_000)
    if effective < 1:
        raise ValueError(
            f"--context-window {args.context_window} leaves no room for the prompt once "
            f"min(--max-output-tokens, 20000) = {min(args.max_output_tokens, 20_000)} is kept for the output"
        )
    return LoopConfig(
        model=args.model,
        max_turns=args.max_turns,
        max_tokens=max_tokens,
        escalated_max_tokens=args.max_output_tokens,
        context_window=args.context_window,
        max_total_tokens=args.max_tokens_total or None,
        max_wall_clock_s=args.max_wall_clock or None,
        thinking_budget_tokens=budget,
        token_budget=args.budget,
        max_cost_usd=args.max_budget_usd,
        fallback_model=args.fallback_model,
        source="sdk",
    )


def _hooks(args: argparse.Namespace) -> HookSettings | None:
    """The ``--hooks`` file, run in the workspace (``ValueError`` says what is wrong with it)."""
    if args.hooks is None:
        return None
    try:
        return load_hooks(args.hooks, cwd=args.workspace.resolve(), environ=os.environ)
    except ValueError as exc:
        raise ValueError(f"--hooks: {exc}") from exc


async def _run(
    args: argparse.Namespace, config: LoopConfig, out: TextIO, hooks: HookSettings | None = None
) -> int:
    metrics = LoopMetrics() if args.metrics_port is not None else None
    async with contextlib.AsyncExitStack() as stack:
        if metrics is not None:
            try:
                port = await stack.enter_async_context(serving(metrics, METRICS_HOST, args.metrics_port))
            except OSError as exc:
                where = f"{METRICS_HOST}:{args.metrics_port}"
                print(f"switchyard agent: --metrics-port: cannot listen on {where} ({exc.strerror or exc})",
                      file=sys.stderr)  # fmt: skip
                return EXIT_USAGE
            print(f"switchyard agent: metrics on http://{METRICS_HOST}:{port}/metrics", file=sys.stderr)
        return await _agent(args, config, out, [metrics] if metrics is not None else [], hooks)
    raise AssertionError("unreachable")  # pragma: no cover - the block returns


async def _agent(
    args: argparse.Namespace,
    config: LoopConfig,
    out: TextIO,
    observers: list[RunObserver],
    hooks: HookSettings | None = None,
) -> int:
    root = args.workspace.resolve()
    caller: ModelCaller | None = None
    if args.base_url:
        from loop.callers.sdk import SdkModelCaller

        caller = SdkModelCaller(args.base_url, args.api_key)
    printer = JsonPrinter(out) if args.json else TextPrinter(out)
    try:
        async with contextlib.AsyncExitStack() as stack:
            tools: list[Tool[Any]] = [*builtin_tools(root), *await _mcp_tools(args, stack)]
            policy, ask = headless.permissions(
                args.permission_mode,
                args.allow,
                tools,
                yes=args.yes,
                interactive=sys.stdin.isatty() and not args.json,
                ask=_ask_on_terminal,
            )
            params = QueryParams(
                messages=args.task,
                system=AgentPrompt(root, config.model),
                tools=tools,
                config=config,
                deps=LoopDeps(call_model=caller),
                permissions=policy,
                can_use_tool=ask,
                session=ContextSession(),
                observers=observers,
                hooks=hooks,
                subagents=_subagents(args, tools),
            )
            run = query(params)
            async with run:
                async for event in run:
                    printer.event(event)
    finally:
        close = getattr(caller, "aclose", None)
        if close is not None:
            await close()
    printer.terminal(run.terminal)
    if isinstance(run.terminal, PermissionDenied):
        return headless.EXIT_PERMISSION_DENIED
    return EXIT_COMPLETED if isinstance(run.terminal, Completed) else EXIT_STOPPED


def _subagents(args: argparse.Namespace, tools: list[Tool[Any]]) -> SubagentConfig | None:
    """``--agents``, choosing from the run's tools (``ConfigError``: exit code 2)."""
    if args.agents is None:
        return None
    try:
        return SubagentConfig(load_agents(args.agents, tools), max_concurrent=args.max_subagents)
    except ValueError as exc:
        raise ConfigError(f"--agents: {exc}") from None


async def _mcp_tools(args: argparse.Namespace, stack: contextlib.AsyncExitStack) -> list[Tool[Any]]:
    """The tools of ``--mcp-config``'s servers, connected for the life of ``stack``."""
    if not args.mcp_config:
        return []
    try:
        from loop.mcp import McpConfigError, connect, load_configs
    except ImportError as exc:  # the optional dependency: switchyard[mcp]
        raise ConfigError(
            f"--mcp-config needs the mcp package (pip install 'switchyard[mcp]'): {exc}"
        ) from None
    try:
        servers = load_configs(args.mcp_config, os.environ)
    except McpConfigError as exc:
        raise ConfigError(f"--mcp-config: {exc}") from None
    return await stack.enter_async_context(connect(servers, on_failure=_report_failure))


def _report_failure(failure: ServerFailure) -> None:
    """A server that failed: the run goes on without its tools (one line on stderr)."""
    print(f"switchyard agent: {failure.message}; its tools are not available", file=sys.stderr)


async def _ask_on_terminal(request: PermissionRequest) -> PermissionVerdict:
    shown = orjson.dumps(request.tool_input).decode()
    answer = await asyncio.to_thread(input, f"\nAllow {request.tool_name} {shown[:300]}? [y/N] ")
    allowed = answer.strip().lower() in ("y", "yes")
    return PermissionVerdict(allowed, "approved at the terminal" if allowed else "refused at the terminal")


if __name__ == "__main__":
    sys.exit(main())
