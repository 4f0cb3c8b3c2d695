"""``Session``: one conversation across ``query()`` calls, saved to and resumed from JSON.

A session holds what outlives a run (history, context session, total budgets, current model);
the token budget, counters and sub-agents stay per run. The JSON holds data only and is
versioned (``SESSION_VERSION``): refuse, never guess, a newer format.

Details: docs/internals/loop.md
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from loop.config import LoopConfig
from loop.context.result import StoredText
from loop.context.session import CircuitBreaker, ContextSession
from loop.deps import LoopDeps
from loop.events import LoopEvent
from loop.messages import Block, Message, user_message
from loop.query import QueryParams, query
from loop.run import Run
from loop.state import initial_state
from loop.transitions import Guardrail, GuardrailKind, GuardrailReport, Terminal
from loop.usage import TokenUsage

SESSION_FORMAT = "switchyard.loop.session"
SESSION_VERSION = 1


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Breaker(_Strict):
    consecutive_failures: int = 0
    trips: int = 0
    opened_seconds_ago: float | None = None


class _Stored(_Strict):
    tool_use_id: str
    tool: str
    text: str


class _Reported(_Strict):
    covered_messages: int
    tokens: int
    overhead_tokens: int


class _Context(_Strict):
    breaker: _Breaker = _Breaker()
    learned_limit: int | None = None
    summariser_calls: int = 0
    reported: _Reported | None = None
    stored_results: list[_Stored] = []


class _Usage(_Strict):
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cost_usd: float = 0.0


class SessionFile(_Strict):
    """The saved form (version 1)."""

    format: Literal["switchyard.loop.session"]
    version: Literal[1]
    messages: list[dict[str, Any]]
    usage: _Usage
    runs: int
    max_total_tokens: int | None
    context: _Context
    model: str | None = None
    max_cost_usd: float | None = None


@dataclass(slots=True)
class _Recorder:
    """Takes a finished run's history and usage into the session."""

    session: Session
    run: Run | None = None

    def on_event(self, event: LoopEvent) -> None:
        return None

    def on_terminal(self, terminal: Terminal) -> None:
        if self.run is not None:
            self.session._record(self.run)


@dataclass(slots=True)
class Session:
    tools: Sequence[Any] = ()
    system: Any = None
    config: LoopConfig = field(default_factory=LoopConfig)
    deps: LoopDeps = field(default_factory=LoopDeps)
    max_total_tokens: int | None = None
    """Billed tokens over every run of the session (``None``: only each run's own limit)."""
    max_cost_usd: float | None = None
    """USD over every run of the session (``None``: only each run's own limit)."""
    messages: list[Message] = field(default_factory=list)
    usage: TokenUsage = field(default_factory=TokenUsage)
    """Totals over every run so far."""
    runs: int = 0
    model: str | None = None
    """The model the runs use (``None``: ``config.model``); the fallback model once a run fell
    back to it."""
    context: ContextSession = field(default_factory=ContextSession)
    options: dict[str, Any] = field(default_factory=dict)
    """Other ``QueryParams`` fields for every run (``permissions``, ``can_use_tool``,
    ``tool_deps``, ``output_type``, ``stop_hooks``, ``observers``...)."""
    _running: Run | None = None

    @property
    def remaining_tokens(self) -> int | None:
        if self.max_total_tokens is None:
            return None
        return max(self.max_total_tokens - self.usage.billed, 0)

    @property
    def remaining_cost_usd(self) -> float | None:
        if self.max_cost_usd is None:
            return None
        return max(self.max_cost_usd - self.usage.cost_usd, 0.0)

    def query(self, prompt: str | Sequence[Block] | Message, **overrides: Any) -> Run:
        """Start the next run: the history so far plus ``prompt`` (text, blocks, or a user message).
        ``overrides`` replace ``QueryParams`` fields for this run only."""
        if self._running is not None and not self._running.finished:
            raise RuntimeError("the session's previous run has not finished")
        if isinstance(prompt, str):
            message = user_message(prompt)
        elif isinstance(prompt, dict):
            message = prompt
        else:
            message = {"role": "user", "content": list(prompt)}
        history = (*self.messages, message)
        recorder = _Recorder(self)
        options = {**self.options, **overrides}
        observers = (*options.pop("observers", ()), recorder)
        config = options.pop("config", self.config)
        if self.model is not None and self.model != config.model:
            config = replace(config, model=self.model)  # on the fallback model: it stays there
        remaining, cost_left = self.remaining_tokens, self.remaining_cost_usd
        if (remaining is not None and remaining <= 0) or (cost_left is not None and cost_left <= 0):
            run = Run(lambda r: _exhausted(r, self, history, config), history, observers)
        else:
            if remaining is not None and (
                config.max_total_tokens is None or remaining < config.max_total_tokens
            ):
                config = replace(config, max_total_tokens=remaining)
            if cost_left is not None and (config.max_cost_usd is None or cost_left < config.max_cost_usd):
                config = replace(config, max_cost_usd=cost_left)
            params = QueryParams(
                messages=history,
                system=options.pop("system", self.system),
                tools=options.pop("tools", self.tools),
                config=config,
                deps=options.pop("deps", self.deps),
                session=self.context,
                observers=observers,
                **options,
            )
            run = query(params)
        recorder.run = run
        self._running = run
        return run

    def _record(self, run: Run) -> None:
        self.messages = list(run.state.messages)
        self.usage = self.usage + run.state.usage
        self.runs += 1
        if run.state.model:
            self.model = run.state.model

    # -- saving and resuming -------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        now = self.deps.clock.now()
        context = self.context
        breaker = context.breaker
        reported = None
        if context.reported is not None:
            covered, tokens, overhead = context.reported
            if tuple(self.messages[: len(covered)]) == covered:
                reported = _Reported(covered_messages=len(covered), tokens=tokens, overhead_tokens=overhead)
        saved = SessionFile(
            format=SESSION_FORMAT,
            version=SESSION_VERSION,
            messages=self.messages,
            usage=_Usage(**self.usage.as_dict(), cost_usd=self.usage.cost_usd),
            runs=self.runs,
            max_total_tokens=self.max_total_tokens,
            max_cost_usd=self.max_cost_usd,
            model=self.model,
            context=_Context(
                breaker=_Breaker(
                    consecutive_failures=breaker.consecutive_failures,
                    trips=breaker.trips,
                    opened_seconds_ago=None
                    if breaker.opened_at is None
                    else max(now - breaker.opened_at, 0.0),
                ),
                learned_limit=context.learned_limit,
                summariser_calls=context.summariser_calls,
                reported=reported,
                stored_results=[
                    _Stored(tool_use_id=item.tool_use_id, tool=item.tool, text=item.text)
                    for item in context.store.items()
                ],
            ),
        )
        return saved.model_dump(mode="json")

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the session as JSON (atomically: a temporary file renamed over ``path``)."""
        target = Path(path)
        temporary = target.with_name(f".{target.name}.tmp")
        temporary.write_bytes(orjson.dumps(self.to_json(), option=orjson.OPT_INDENT_2))
        temporary.replace(target)

    @classmethod
    def from_json(cls, data: Any, **runtime: Any) -> Session:
        """A session from ``to_json``'s value; ``runtime``: the ``Session`` fields that are not
        saved (``tools``, ``system``, ``config``, ``deps``, ``options``)."""
        if not isinstance(data, dict) or data.get("format") != SESSION_FORMAT:
            raise ValueError(f"not a saved session (expected format {SESSION_FORMAT!r})")
        version = data.get("version")
        if version != SESSION_VERSION:
            raise ValueError(
                f"unsupported session version {version!r} (this version reads {SESSION_VERSION})"
            )
        try:
            saved = SessionFile.model_validate(data)
        except ValidationError as exc:
            raise ValueError(
                f"invalid session file: {exc.error_count()} error(s): {exc.errors()[0]['msg']}"
            ) from exc
        session = cls(**runtime)
        session.messages = list(saved.messages)
        session.usage = TokenUsage(**saved.usage.model_dump())
        session.runs = saved.runs
        session.max_total_tokens = saved.max_total_tokens
        session.max_cost_usd = saved.max_cost_usd
        session.model = saved.model
        context = session.context
        opened = saved.context.breaker.opened_seconds_ago
        context.breaker = CircuitBreaker(
            consecutive_failures=saved.context.breaker.consecutive_failures,
            opened_at=None if opened is None else session.deps.clock.now() - opened,
            trips=saved.context.breaker.trips,
        )
        context.learned_limit = saved.context.learned_limit
        context.summariser_calls = saved.context.summariser_calls
        for item in saved.context.stored_results:
            context.store.put(StoredText(item.tool_use_id, item.tool, item.text))
        if saved.context.reported is not None:
            reported = saved.context.reported
            covered = tuple(session.messages[: reported.covered_messages])
            context.remember_context(covered, reported.tokens, reported.overhead_tokens)
        return session

    @classmethod
    def load(cls, path: str | os.PathLike[str], **runtime: Any) -> Session:
        return cls.from_json(orjson.loads(Path(path).read_bytes()), **runtime)


def _exhausted(
    run: Run, session: Session, history: tuple[Message, ...], config: LoopConfig
) -> AsyncGenerator[LoopEvent, None]:
    """A run that ends before its first call: the session's token or cost budget is spent."""
    if session.remaining_tokens is not None and session.remaining_tokens <= 0:
        kind, limit, used = (
            GuardrailKind.TOKENS,
            float(session.max_total_tokens or 0),
            float(session.usage.billed),
        )
        detail = f"the session used {used:.0f} billed tokens of its {limit:.0f}-token budget"
    else:
        kind, limit, used = GuardrailKind.COST, session.max_cost_usd or 0.0, session.usage.cost_usd
        detail = f"the session spent ${used:.4f} of its ${limit:g} budget"
    report = GuardrailReport(limit=limit, observed=used, turns=0, detail=detail)
    run.settle(Guardrail(kind, report), initial_state(history, session.deps.clock.now()))
    return _no_events()


async def _no_events() -> AsyncGenerator[LoopEvent, None]:
    events: tuple[LoopEvent, ...] = ()
    for event in events:
        yield event
