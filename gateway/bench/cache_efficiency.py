"""Prompt-cache efficiency of a long Claude Code session through the gateway, per upstream.

``python -m gateway.bench.cache_efficiency [--turns 30] [--providers anthropic,bedrock,vertex,foundry]
[--json OUT] [--per-turn]``

For each provider: its emulator (:func:`~gateway.emulator.upstreams.emulated_upstream`, fixture
credentials, the emulator's prompt-cache model), an in-process gateway in front of it
(``create_app(Settings.from_environ({"GATEWAY_API_KEYS": ..., **upstream.env}))`` served by
:func:`gateway.service.running`), and the real ``anthropic`` SDK (``AsyncAnthropic``, streaming)
replaying a Claude Code session built from fixture 015 (:mod:`gateway.bench.cc_session`): its
headers (``X-Claude-Code-Session-Id``, ``anthropic-beta``, ...), system blocks with the billing
header (a fresh ``cch=`` on every request, as first-party Claude Code sends it), 24 tools and first
user message. The message breakpoint moves to the newest block every turn, as Claude Code moves it.
On upstreams whose beta policy refuses ``mid-conversation-system`` (Bedrock, Vertex) the captured
``role: "system"`` message becomes a ``<system-reminder>`` block of the first user message, as
Claude Code sends it there.

The scripted model (emulator headers ``x-emulator-scenario`` / ``x-emulator-tools``) calls one tool
per turn and every turn appends its ``tool_use`` answer and a ``tool_result``. The emulator's
``agent`` scenario never calls a tool twice, so after the fixture's 24 tools the session goes on
the way an interactive one does: the ``tool_use`` scenario answers a ``tool_result`` with text, the
client sends a new user prompt, and the model calls ``Bash`` again (turns 25-30 at 30 turns).

Injected mid-session, as a client might do them:

* beta toggles: on the turns of ``--toggles`` the client leaves a latchable beta out of
  ``anthropic-beta`` (and sends it again on the next turn); the gateway's session latch must keep
  sending it upstream, so the upstream prefix (model, betas, tools, system, history) stays the same;
* one model switch: turn ``--switch-turn`` (20) asks for ``--switch-model`` (claude-opus-4-5), the
  next turn goes back. Both legitimately break the cache (a cache is per model).

Measured per provider:

* **cache share** from turn 3 on, excluding the switch turn and the switch-back turn:
  ``sum(cache_read) / sum(input + cache_read + cache_write)`` over those turns, from the usage the
  SDK received; next to it the **ceiling**: the same share if every turn read everything the latest
  earlier request of its model cached (all but the newest turn; the billing block and the
  per-request overhead are never cacheable in the emulator's model), by the emulator's token rule;
* **gateway-caused breaks**: turns whose upstream prefix (as the emulator received it: model,
  betas as a set, tools, system blocks, the previous request's history; ``cache_control`` markers
  left out, key order kept) differs from the previous request's for any reason other than the
  injected model switch. The billing header block counts as part of the prefix on Bedrock and
  Vertex, whose caches key on it (:mod:`gateway.cache.normalise` pins its ``cch=`` there); the
  first-party API, Foundry and the emulator keep it out of the key. Cross-checked with the turns
  whose cache read fell below the ceiling and with ``gateway_cache_breaks_total`` by reason;
* **classification**: the gateway's break reason per turn (``gateway_cache_breaks_total`` deltas)
  must be ``first_request`` on turn 1, ``model_changed`` on the switch turn and the switch-back
  turn, and nothing on any other turn;
* **latch**: on every toggled turn, the dropped beta reached the upstream anyway (when the
  upstream's beta policy accepts it at all);
* **detector drift**: after every turn the gateway's record of the session (``GET
  /v1/sessions/{id}``) must keep the same betas hash as long as the upstream received the same beta
  set; otherwise a later miss would be blamed on ``betas_changed``.

Targets: cache share >= 95%, 0 gateway-caused breaks, 100% of breaks classified as expected (plus
the latch on every toggled turn and no detector drift). No times are measured.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import sys
import tempfile
import urllib.parse
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final, cast

import aiohttp
import anthropic
import orjson

from gateway.bench import evloop
from gateway.bench.cc_session import DEFAULT_FIXTURE, ClaudeCodeSession
from gateway.cache.latches import DEFAULT_LATCHED_BETAS
from gateway.config import ProviderName, Settings
from gateway.emulator.prompt import flatten_prompt
from gateway.emulator.recorder import RecordedRequest
from gateway.emulator.runner import RunningEmulator
from gateway.emulator.upstreams import PROVIDERS, emulated_upstream
from gateway.metrics import GatewayMetrics
from gateway.providers.betas import BetaPolicy
from gateway.server import create_app
from gateway.service import running

CLIENT_KEY: Final = "sk-bench-cache-efficiency"
DEFAULT_TURNS: Final = 30
DEFAULT_SWITCH_TURN: Final = 20
DEFAULT_SWITCH_MODEL: Final = "claude-opus-4-5"
FROM_TURN: Final = 3
CM: Final = "context-management-2025-06-27"
EFFORT: Final = "effort-2025-11-24"
MID_CONVERSATION_SYSTEM: Final = "mid-conversation-system-2026-04-07"
# turn -> betas the client leaves out of anthropic-beta on that turn (and sends again on the next)
DEFAULT_TOGGLES: Final[Mapping[int, tuple[str, ...]]] = {
    4: (CM,),
    5: (CM,),
    8: (EFFORT,),
    11: (CM, EFFORT),
    16: (EFFORT,),
    22: (CM,),
    24: (CM,),
    27: (EFFORT,),
}
TARGET_SHARE: Final = 0.95
# upstreams whose prompt cache keys on Claude Code's billing header block (normalise.py; the
# first-party API keeps it out, which is why Claude Code may vary its cch= on every request)
BILLING_IN_KEY: Final = frozenset({"bedrock", "vertex"})
FALLBACK_TOOL: Final = "Bash"
BOOKKEEPING_TIMEOUT_S: Final = 10.0

# --- what the upstream received -------------------------------------------------------------------


def _strip_markers(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_markers(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip_markers(v) for v in value]
    return value


def _bytes(value: Any, *, sort: bool = False) -> bytes:
    return orjson.dumps(_strip_markers(value), option=orjson.OPT_SORT_KEYS if sort else 0)


def is_messages_request(record: RecordedRequest) -> bool:
    """A model turn on any upstream (not count_tokens, models or token endpoints)."""
    path = record.path_only
    if record.method != "POST" or "count" in path:
        return False
    return path.endswith(
        ("/v1/messages", "/invoke", "/invoke-with-response-stream", ":rawPredict", ":streamRawPredict")
    )


def _is_billing(block: Any) -> bool:
    return (
        isinstance(block, dict)
        and block.get("type") == "text"
        and "cache_control" not in block
        and str(block.get("text", "")).startswith("x-anthropic-billing-header:")
    )


@dataclass(frozen=True)
class UpstreamPrefix:
    """The cacheable prefix of one upstream request, in comparable form.

    Byte strings keep the received key order (a re-ordered tool schema renders differently);
    the ``*_sorted`` twins tell a key-order-only change apart.
    """

    model: str
    betas: tuple[str, ...]  # in the order sent
    tools: bytes
    tools_sorted: bytes
    system: bytes  # every system block but a leading billing header block
    system_sorted: bytes
    billing: str  # the billing header text ("" if none)
    messages: tuple[bytes, ...]
    messages_sorted: tuple[bytes, ...]
    body: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def of(cls, provider: str, record: RecordedRequest) -> UpstreamPrefix:
        body = record.json()
        if not isinstance(body, dict):
            raise ValueError(f"{provider}: upstream body is not a JSON object")
        path = record.path_only
        if provider == "bedrock":  # /model/{id}/invoke-with-response-stream; betas in the body
            model = urllib.parse.unquote(path.split("/model/", 1)[1].rsplit("/", 1)[0])
            betas = [str(b) for b in body.get("anthropic_beta") or []]
        else:
            if provider == "vertex":  # .../publishers/anthropic/models/{model}:streamRawPredict
                model = urllib.parse.unquote(path.rsplit("/models/", 1)[1].split(":", 1)[0])
            else:
                model = str(body.get("model", ""))
            betas = [
                b.strip() for v in record.header_values("anthropic-beta") for b in v.split(",") if b.strip()
            ]
        system = body.get("system")
        blocks = system if isinstance(system, list) else [] if system is None else [system]
        billing = ""
        if blocks and _is_billing(blocks[0]):
            billing = str(blocks[0]["text"])
            blocks = blocks[1:]
        tools = body.get("tools") or []
        messages = body.get("messages") or []
        return cls(
            model=model,
            betas=tuple(betas),
            tools=_bytes(tools),
            tools_sorted=_bytes(tools, sort=True),
            system=_bytes(blocks),
            system_sorted=_bytes(blocks, sort=True),
            billing=billing,
            messages=tuple(_bytes(m) for m in messages),
            messages_sorted=tuple(_bytes(m, sort=True) for m in messages),
            body=body,
        )


def _cch(billing: str) -> str:
    found = re.search(r"cch=[0-9a-fA-F]*", billing)
    return found.group(0) if found else repr(billing[-24:])


def prefix_changes(previous: UpstreamPrefix, current: UpstreamPrefix, billing_in_key: bool) -> list[str]:
    """What of ``previous``'s prefix ``current`` does not repeat (empty: the prefix is intact)."""
    changes: list[str] = []
    if previous.model != current.model:
        changes.append(f"model {previous.model} -> {current.model}")
    if set(previous.betas) != set(current.betas):
        gone = sorted(set(previous.betas) - set(current.betas))
        added = sorted(set(current.betas) - set(previous.betas))
        changes.append(f"betas -{','.join(gone) or '()'} +{','.join(added) or '()'}")
    for name, old, new, old_sorted, new_sorted in (
        ("tools", previous.tools, current.tools, previous.tools_sorted, current.tools_sorted),
        ("system", previous.system, current.system, previous.system_sorted, current.system_sorted),
    ):
        if old != new:
            changes.append(f"{name}{' (key order only)' if old_sorted == new_sorted else ''}")
    if billing_in_key and previous.billing != current.billing:
        changes.append(f"billing header {_cch(previous.billing)} -> {_cch(current.billing)}")
    shared = len(previous.messages)
    if len(current.messages) < shared:
        changes.append(f"history shortened {shared} -> {len(current.messages)} messages")
    else:
        for index in range(shared):
            if previous.messages[index] != current.messages[index]:
                order_only = previous.messages_sorted[index] == current.messages_sorted[index]
                changes.append(f"messages[{index}]{' (key order only)' if order_only else ''}")
                break
    return changes


@dataclass(frozen=True)
class PromptTokens:
    """The emulator's token view of one upstream request (its own flattening and token rule)."""

    total: int
    uncacheable: int  # billing header block + per-request overhead
    cached_prefix: int  # tokens up to and including the last breakpoint: what this request caches

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> PromptTokens:
        flat = flatten_prompt(dict(body))
        breakpoints = flat.breakpoints
        cached = sum(b.tokens for b in flat.blocks[: breakpoints[-1] + 1]) if breakpoints else 0
        return cls(flat.total_tokens, flat.uncached_tokens, cached)


# --- one turn, one provider -----------------------------------------------------------------------


@dataclass
class TurnRecord:
    turn: int
    model: str
    dropped_betas: list[str]
    scenario: str
    stop_reason: str
    tool: str | None
    input_tokens: int
    cache_read: int
    cache_write: int
    output_tokens: int
    upstream_requests: int
    upstream_model: str
    upstream_betas: list[str]
    billing: str
    latched: list[str]  # dropped betas that reached the upstream anyway
    latch_expected: list[str]  # dropped betas the upstream's beta policy accepts
    ceiling_read: int
    emulator_total: int
    prefix_changes: list[str]
    gateway_break: str | None
    expected_break: str | None
    detector_betas: str | None = None  # the betas hash the gateway's session store kept for this turn

    @property
    def total_input(self) -> int:
        return self.input_tokens + self.cache_read + self.cache_write

    @property
    def latch_ok(self) -> bool:
        return set(self.latch_expected) <= set(self.latched)


@dataclass
class ProviderResult:
    provider: str
    turns: list[TurnRecord]
    switch_turns: tuple[int, ...]
    billing_in_key: bool
    metric_breaks: dict[str, int]  # gateway_cache_breaks_total by reason at the end
    session: dict[str, Any]  # GET /v1/sessions/{id} at the end

    # -- which turns count ------------------------------------------------------------------------
    @property
    def measured(self) -> list[TurnRecord]:
        return [t for t in self.turns if t.turn >= FROM_TURN and t.turn not in self.switch_turns]

    @property
    def excluded(self) -> list[int]:
        return [t.turn for t in self.turns if t.turn < FROM_TURN or t.turn in self.switch_turns]

    # -- the figures ------------------------------------------------------------------------------
    @staticmethod
    def _share(turns: Sequence[TurnRecord], part: Callable[[TurnRecord], int]) -> float:
        total = sum(t.total_input for t in turns)
        return sum(part(t) for t in turns) / total if total else float("nan")

    @property
    def cache_share(self) -> float:
        return self._share(self.measured, lambda t: t.cache_read)

    @property
    def ceiling_share(self) -> float:
        return self._share(self.measured, lambda t: t.ceiling_read)

    @property
    def cache_share_with_switch(self) -> float:
        return self._share([t for t in self.turns if t.turn >= FROM_TURN], lambda t: t.cache_read)

    @property
    def gateway_breaks(self) -> list[TurnRecord]:
        """Turns whose upstream prefix changed for a reason other than the injected model switch."""
        out = []
        for t in self.turns:
            unexplained = [
                c for c in t.prefix_changes if not (c.startswith("model ") and t.turn in self.switch_turns)
            ]
            if unexplained:
                out.append(t)
        return out

    @property
    def reads_below_ceiling(self) -> list[int]:
        return [t.turn for t in self.measured if t.cache_read < t.ceiling_read]

    @property
    def expected_breaks(self) -> dict[int, str]:
        return {t.turn: t.expected_break for t in self.turns if t.expected_break is not None}

    @property
    def detected_breaks(self) -> dict[int, str]:
        return {t.turn: t.gateway_break for t in self.turns if t.gateway_break is not None}

    @property
    def classified(self) -> tuple[int, int]:
        """(breaks classified as expected, breaks expected or detected)."""
        expected, detected = self.expected_breaks, self.detected_breaks
        turns = set(expected) | set(detected)
        return sum(1 for n in turns if expected.get(n) == detected.get(n)), len(turns)

    @property
    def classified_share(self) -> float:
        ok, total = self.classified
        return ok / total if total else 1.0

    @property
    def toggled(self) -> list[TurnRecord]:
        return [t for t in self.turns if t.dropped_betas]

    @property
    def latch_ok(self) -> tuple[int, int]:
        toggled = self.toggled
        return sum(1 for t in toggled if t.latch_ok), len(toggled)

    @property
    def billing_values(self) -> int:
        return len({t.billing for t in self.turns})

    @property
    def beta_orders(self) -> int:
        """Distinct orders of the same upstream beta set (order changes are not counted as breaks)."""
        by_set: dict[frozenset[str], set[tuple[str, ...]]] = {}
        for t in self.turns:
            by_set.setdefault(frozenset(t.upstream_betas), set()).add(tuple(t.upstream_betas))
        return max((len(v) for v in by_set.values()), default=0)

    @property
    def detector_drift(self) -> list[int]:
        """Turns after which the gateway's break detector remembers a different beta set than for the
        previous turn although the upstream received the same set: a later miss on the next turn
        would be blamed on ``betas_changed``."""
        drift = []
        for before, after in zip(self.turns, self.turns[1:], strict=False):
            same_upstream = set(before.upstream_betas) == set(after.upstream_betas)
            if same_upstream and before.detector_betas != after.detector_betas:
                drift.append(after.turn)
        return drift

    @property
    def passed(self) -> dict[str, bool]:
        ok, total = self.latch_ok
        return {
            "cache_share": self.cache_share >= TARGET_SHARE,
            "gateway_breaks": not self.gateway_breaks,
            "classified": self.classified_share == 1.0,
            "latch": ok == total,
            "detector": not self.detector_drift,
        }

    def notes(self) -> list[str]:
        notes: list[str] = []
        p = self.provider
        for t in self.gateway_breaks:
            notes.append(f"{p} turn {t.turn}: upstream prefix changed: {'; '.join(t.prefix_changes)}")
        expected, detected = self.expected_breaks, self.detected_breaks
        for n in sorted(set(expected) | set(detected)):
            if expected.get(n) != detected.get(n):
                notes.append(
                    f"{p} turn {n}: gateway classified {detected.get(n)}, expected {expected.get(n)}"
                )
        for t in self.toggled:
            if not t.latch_ok:
                missing = sorted(set(t.latch_expected) - set(t.latched))
                notes.append(
                    f"{p} turn {t.turn}: dropped beta(s) {','.join(missing)} did not reach the upstream"
                )
        if self.reads_below_ceiling:
            notes.append(f"{p}: cache read below the ceiling on turns {self.reads_below_ceiling}")
        for t in self.turns:
            if t.upstream_requests != 1:
                notes.append(f"{p} turn {t.turn}: {t.upstream_requests} upstream requests (retries?)")
            if t.emulator_total != t.total_input:
                notes.append(
                    f"{p} turn {t.turn}: usage total {t.total_input} != emulator prompt {t.emulator_total}"
                )
        metric = {k: v for k, v in self.metric_breaks.items() if v}
        per_turn: dict[str, int] = {}
        for reason in detected.values():
            per_turn[reason] = per_turn.get(reason, 0) + 1
        if metric != per_turn:
            notes.append(f"{p}: gateway_cache_breaks_total {metric} != per-turn deltas {per_turn}")
        if self.billing_values > 1 and not self.billing_in_key:
            notes.append(
                f"{p}: billing header passed through with {self.billing_values} distinct cch values "
                "(outside the cache key on this upstream: not a break)"
            )
        if self.detector_drift:
            notes.append(
                f"{p}: the gateway's session store recorded a different betas hash after turns "
                f"{self.detector_drift} although the upstream beta set was unchanged (it records the "
                "client's betas, not the latched ones it sent)"
            )
        if self.beta_orders > 1:
            notes.append(
                f"{p}: the same upstream beta set was sent in {self.beta_orders} different orders "
                "(latched betas are appended at the end on toggled turns; compared as a set)"
            )
        return notes

    def as_dict(self) -> dict[str, Any]:
        ok, total = self.classified
        latch_ok, toggled = self.latch_ok
        return {
            "provider": self.provider,
            "cache_share": self.cache_share,
            "ceiling_share": self.ceiling_share,
            "cache_share_incl_switch_turns": self.cache_share_with_switch,
            "measured_turns": [t.turn for t in self.measured],
            "excluded_turns": self.excluded,
            "gateway_breaks": len(self.gateway_breaks),
            "gateway_break_turns": {str(t.turn): t.prefix_changes for t in self.gateway_breaks},
            "reads_below_ceiling": self.reads_below_ceiling,
            "breaks_by_reason": self.metric_breaks,
            "expected_breaks": {str(k): v for k, v in self.expected_breaks.items()},
            "detected_breaks": {str(k): v for k, v in self.detected_breaks.items()},
            "classified": {"ok": ok, "total": total, "share": self.classified_share},
            "latch": {"ok": latch_ok, "toggled_turns": toggled},
            "billing_in_key": self.billing_in_key,
            "billing_values": self.billing_values,
            "beta_orders": self.beta_orders,
            "detector_drift_turns": self.detector_drift,
            "passed": self.passed,
            "notes": self.notes(),
            "session": self.session,
            "turns": [
                {**asdict(t), "total_input": t.total_input, "latch_ok": t.latch_ok} for t in self.turns
            ],
        }


# --- the run --------------------------------------------------------------------------------------


@dataclass
class Options:
    turns: int = DEFAULT_TURNS
    providers: list[str] = field(default_factory=lambda: list(PROVIDERS))
    switch_turn: int = DEFAULT_SWITCH_TURN  # 0: no model switch
    switch_model: str = DEFAULT_SWITCH_MODEL
    toggles: dict[int, tuple[str, ...]] = field(default_factory=lambda: dict(DEFAULT_TOGGLES))
    fixture: Path = DEFAULT_FIXTURE
    json_out: str | None = None
    per_turn: bool = False

    @property
    def switch_turns(self) -> tuple[int, ...]:
        if not self.switch_turn or self.switch_turn > self.turns:
            return ()
        return tuple(n for n in (self.switch_turn, self.switch_turn + 1) if n <= self.turns)

    def model_for(self, turn: int, base: str) -> str:
        return self.switch_model if turn == self.switch_turn else base

    def expected_break(self, turn: int) -> str | None:
        if turn == 1:
            return "first_request"
        return "model_changed" if turn in self.switch_turns else None


@contextlib.contextmanager
def _process_env(values: Mapping[str, str]) -> Iterator[None]:
    """The cloud SDKs' variables in ``os.environ`` for as long as the provider lives."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _counter(metrics: GatewayMetrics, sample: str, **labels: str) -> dict[str, float]:
    """Every sample of one counter matching ``labels``, keyed by its remaining labels joined."""
    out: dict[str, float] = {}
    for family in metrics.registry.collect():
        for s in family.samples:
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
                key = ",".join(v for k, v in sorted(s.labels.items()) if k not in labels)
                out[key] = out.get(key, 0.0) + s.value
    return out


def _breaks(metrics: GatewayMetrics, provider: str) -> dict[str, int]:
    return {k: int(v) for k, v in _counter(metrics, "gateway_cache_breaks_total", provider=provider).items()}


async def _recorded(metrics: GatewayMetrics, provider: str, count: int) -> None:
    """Wait until the gateway has recorded ``count`` requests (its bookkeeping ends after the
    stream, when the cache pipeline's ``after`` has run)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + BOOKKEEPING_TIMEOUT_S
    while sum(_counter(metrics, "gateway_requests_total", provider=provider).values()) < count:
        if loop.time() > deadline:
            raise RuntimeError(f"{provider}: the gateway did not record request {count}")
        await asyncio.sleep(0.005)


def _scripted_model(session: ClaudeCodeSession, tool_order: Sequence[str]) -> tuple[str, dict[str, str]]:
    """Emulator headers for this turn: a fresh tool while any is left, then Bash after prompts."""
    fresh = [name for name in tool_order if name not in session.called_tools]
    if fresh:
        return "agent", {"x-emulator-scenario": "agent", "x-emulator-tools": ",".join(fresh)}
    return "tool_use", {"x-emulator-scenario": "tool_use", "x-emulator-tool": FALLBACK_TOOL}


def tool_order(session: ClaudeCodeSession) -> list[str]:
    """The captured tools, Bash first (the captured session's tool), then the rest in order."""
    names = session.tool_names
    return [FALLBACK_TOOL, *(n for n in names if n != FALLBACK_TOOL)] if FALLBACK_TOOL in names else names


async def _send(
    client: anthropic.AsyncAnthropic,
    session: ClaudeCodeSession,
    model: str,
    headers: dict[str, str],
) -> anthropic.types.Message:
    request = session.next_request(model)
    other = session.other_fields
    max_tokens = int(other.pop("max_tokens"))
    metadata = other.pop("metadata", None)
    other.pop("stream", None)
    async with client.messages.stream(
        model=request["model"],
        max_tokens=max_tokens,
        messages=cast(Any, request["messages"]),
        system=cast(Any, request["system"]),
        tools=cast(Any, request["tools"]),
        metadata=cast(Any, metadata) if metadata is not None else anthropic.omit,
        extra_body=other,
        extra_headers=headers,
        extra_query={"beta": "true"},
    ) as stream:
        return await stream.get_final_message()


def _ceiling(turns: Sequence[TurnRecord], tokens: Sequence[PromptTokens], model: str) -> int:
    """What the latest earlier request to ``model`` cached (0 if none): the most this one can read."""
    for record, counted in zip(reversed(turns), reversed(tokens), strict=True):
        if record.upstream_model == model:
            return counted.cached_prefix
    return 0


async def run_provider(opts: Options, provider: str, workdir: Path) -> ProviderResult:
    metrics = GatewayMetrics()
    async with emulated_upstream(provider, workdir) as upstream:
        with _process_env(upstream.process_env):
            settings = Settings.from_environ({"GATEWAY_API_KEYS": CLIENT_KEY, **upstream.env})
            async with running(create_app(settings, metrics=metrics), "127.0.0.1", 0) as gateway:
                return await _drive(opts, provider, settings, metrics, upstream.emulator, gateway.base_url)


def _accepted(settings: Settings, provider: str) -> frozenset[str] | None:
    return BetaPolicy.from_settings(settings.beta_policy).accepted.get(ProviderName(provider))


async def _session_view(http: aiohttp.ClientSession, base_url: str, session_id: str) -> dict[str, Any]:
    """``GET /v1/sessions/{id}``: the gateway's latches and last prefix hashes for the session."""
    url = f"{base_url}/v1/sessions/{session_id}"
    async with http.get(url, headers={"x-api-key": CLIENT_KEY}) as response:
        data = await response.json()
        return cast(dict[str, Any], data) if isinstance(data, dict) else {"status": response.status}


def _betas_hash(view: Mapping[str, Any]) -> str | None:
    last = view.get("last_request")
    prefix = last.get("prefix") if isinstance(last, Mapping) else None
    value = prefix.get("betas") if isinstance(prefix, Mapping) else None
    return value if isinstance(value, str) else None


async def _drive(
    opts: Options,
    provider: str,
    settings: Settings,
    metrics: GatewayMetrics,
    emulator: RunningEmulator,
    gateway_url: str,
) -> ProviderResult:
    session = ClaudeCodeSession.from_fixture(opts.fixture)
    order = tool_order(session)
    accepted = _accepted(settings, provider)
    if accepted is not None and MID_CONVERSATION_SYSTEM not in accepted:
        session.fold_system_messages()  # what Claude Code sends on Bedrock and Vertex
    billing_in_key = provider in BILLING_IN_KEY
    turns: list[TurnRecord] = []
    prefixes: list[UpstreamPrefix] = []
    counted: list[PromptTokens] = []
    client = anthropic.AsyncAnthropic(api_key=CLIENT_KEY, base_url=gateway_url, max_retries=0)
    http = aiohttp.ClientSession()
    view: dict[str, Any] = {}
    try:
        for n in range(1, opts.turns + 1):
            model = opts.model_for(n, session.model)
            dropped = list(opts.toggles.get(n, ()))
            scenario, emulator_headers = _scripted_model(session, order)
            seen = len(emulator.request_log)
            breaks_before = _breaks(metrics, provider)
            final = await _send(client, session, model, session.headers(dropped, emulator_headers))
            await _recorded(metrics, provider, n)
            breaks_after = _breaks(metrics, provider)
            reasons = [r for r, c in breaks_after.items() if c > breaks_before.get(r, 0)]
            received = [r for r in emulator.requests[seen:] if is_messages_request(r)]
            if not received:
                raise RuntimeError(f"{provider} turn {n}: the emulator received no model request")
            prefix = UpstreamPrefix.of(provider, received[-1])
            tokens = PromptTokens.of(prefix.body)
            changes = prefix_changes(prefixes[-1], prefix, billing_in_key) if prefixes else []
            view = await _session_view(http, gateway_url, session.session_id)
            usage = final.usage
            tool_uses = session.add_answer([b.model_dump() for b in final.content])
            turns.append(
                TurnRecord(
                    turn=n,
                    model=model,
                    dropped_betas=dropped,
                    scenario=scenario,
                    stop_reason=str(final.stop_reason),
                    tool=str(tool_uses[0]["name"]) if tool_uses else None,
                    input_tokens=usage.input_tokens,
                    cache_read=usage.cache_read_input_tokens or 0,
                    cache_write=usage.cache_creation_input_tokens or 0,
                    output_tokens=usage.output_tokens,
                    upstream_requests=len(received),
                    upstream_model=prefix.model,
                    upstream_betas=list(prefix.betas),
                    billing=prefix.billing,
                    latched=[b for b in dropped if b in prefix.betas],
                    latch_expected=[b for b in dropped if accepted is None or b in accepted],
                    ceiling_read=_ceiling(turns, counted, prefix.model),
                    emulator_total=tokens.total,
                    prefix_changes=changes,
                    gateway_break=",".join(sorted(reasons)) or None,
                    expected_break=opts.expected_break(n),
                    detector_betas=_betas_hash(view),
                )
            )
            prefixes.append(prefix)
            counted.append(tokens)
            if tool_uses:
                session.add_tool_results([(str(u["id"]), f"{u['name']} ok (turn {n})") for u in tool_uses])
            else:
                session.add_prompt(f"Thanks. Next, check step {n + 1} of the plan.")
    finally:
        await client.close()
        await http.close()
    return ProviderResult(
        provider, turns, opts.switch_turns, billing_in_key, _breaks(metrics, provider), view
    )


@dataclass
class Report:
    options: Options
    results: list[ProviderResult]

    def environment(self) -> dict[str, Any]:
        o = self.options
        return {
            "turns": o.turns,
            "fixture": o.fixture.name,
            "model": ClaudeCodeSession.from_fixture(o.fixture).model,
            "switch": {"turn": o.switch_turn, "model": o.switch_model, "turns": list(o.switch_turns)}
            if o.switch_turns
            else None,
            "toggles": {str(k): list(v) for k, v in sorted(o.toggles.items()) if k <= o.turns},
            "from_turn": FROM_TURN,
            "targets": {"cache_share": TARGET_SHARE, "gateway_breaks": 0, "classified": 1.0},
            "python": sys.version.split()[0],
            "anthropic_sdk": anthropic.__version__,
        }

    @property
    def passed(self) -> bool:
        return all(all(r.passed.values()) for r in self.results)

    def as_dict(self) -> dict[str, Any]:
        return {
            "environment": self.environment(),
            "providers": [r.as_dict() for r in self.results],
            "passed": self.passed,
        }

    def render(self, per_turn: bool = False) -> str:
        o = self.options
        env = self.environment()
        excluded = f"turns 1-{FROM_TURN - 1}"
        if o.switch_turns:
            excluded += f" and the model-switch turns {', '.join(map(str, o.switch_turns))}"
        lines = [
            f"switchyard cache efficiency: {o.turns}-turn Claude Code session ({env['fixture']}, "
            f"{env['model']}) through the gateway, per upstream emulator",
            f"  cache share = cache_read / (input + cache_read + cache_write), summed over turns "
            f"{FROM_TURN}-{o.turns}, excluding {excluded}",
            "  ceiling = the same share if each turn read everything but what is new since the last "
            "request of its model",
        ]
        if o.switch_turns:
            lines.append(
                f"  model switch: turn {o.switch_turn} -> {o.switch_model}, turn {o.switch_turn + 1} back "
                f"(expected breaks: model_changed on both)"
            )
        toggles = "; ".join(f"{k}: -{'/-'.join(v)}" for k, v in sorted(o.toggles.items()) if k <= o.turns)
        lines += [f"  beta toggles (left out of anthropic-beta by the client): {toggles or 'none'}", ""]
        header = (
            f"{'provider':<10} | {'cache':>6} {'ceiling':>7} {'w/ sw':>6} | {'gw breaks':>9} {'< ceil':>6} | "
            f"{'classified':>10} | {'latch':>5} {'drift':>5} | breaks by reason (gateway_cache_breaks_total)"
        )
        lines += [header, "-" * len(header)]
        for r in self.results:
            ok, total = r.classified
            lok, ltotal = r.latch_ok
            reasons = ", ".join(f"{k}={v}" for k, v in sorted(r.metric_breaks.items()) if v) or "-"
            lines.append(
                f"{r.provider:<10} | {_pct(r.cache_share)} {_pct(r.ceiling_share, 7)} "
                f"{_pct(r.cache_share_with_switch)} | {len(r.gateway_breaks):>9} {len(r.reads_below_ceiling):>6} | "
                f"{f'{ok}/{total}':>10} | {f'{lok}/{ltotal}':>5} {len(r.detector_drift):>5} | {reasons}"
            )
        lines += [
            "",
            f"targets: cache share >= {TARGET_SHARE:.0%} (turns {FROM_TURN}+, excluding the switch turns); "
            "0 gateway-caused breaks; 100% of breaks classified (turn 1 first_request, switch turns "
            "model_changed, nothing else); latched beta upstream on every toggled turn; no detector drift",
            "gw breaks = turns whose upstream prefix changed other than by the injected model switch; "
            "< ceil = measured turns reading less than the ceiling; w/ sw = cache share incl. switch turns;",
            "latch = toggled turns whose dropped beta still reached the upstream; drift = turns after which "
            "the gateway's break detector remembered other betas than the upstream received",
        ]
        for r in self.results:
            failed = [k for k, v in r.passed.items() if not v]
            lines.append(f"  {r.provider:<10} {'PASS' if not failed else 'FAIL: ' + ', '.join(failed)}")
        notes = [n for r in self.results for n in r.notes()]
        if notes:
            lines += ["", "NOTES:", *(f"  {n}" for n in notes)]
        if per_turn:
            for r in self.results:
                lines += ["", f"{r.provider}: per turn", _turn_header(), *(_turn_row(t) for t in r.turns)]
        return "\n".join(lines)


def _pct(value: float, width: int = 6) -> str:
    return f"{'-':>{width}}" if value != value else f"{value * 100:>{width - 1}.1f}%"


def _turn_header() -> str:
    return (
        f"{'turn':>4} {'model':<16} {'stop':<8} {'tool':<14} {'input':>6} {'read':>6} {'write':>6} "
        f"{'ceil':>6} {'dropped':<14} {'break':<14} changes"
    )


def _turn_row(t: TurnRecord) -> str:
    dropped = ",".join(b.split("-2")[0] for b in t.dropped_betas) or "-"
    return (
        f"{t.turn:>4} {t.model:<16} {t.stop_reason:<8} {t.tool or '-':<14} {t.input_tokens:>6} "
        f"{t.cache_read:>6} {t.cache_write:>6} {t.ceiling_read:>6} {dropped:<14} "
        f"{t.gateway_break or '-':<14} {'; '.join(t.prefix_changes) or '-'}"
    )


async def run_all(opts: Options) -> Report:
    results = []
    with tempfile.TemporaryDirectory(prefix="switchyard-cache-efficiency-") as tmp:
        for provider in opts.providers:
            workdir = Path(tmp) / provider
            workdir.mkdir()
            results.append(await run_provider(opts, provider, workdir))
    return Report(opts, results)


def run(opts: Options) -> Report:
    validate(opts)
    with warnings.catch_warnings():  # the SDK warns about a deprecated --switch-model on every call
        warnings.filterwarnings("ignore", message="The model .* is deprecated", category=DeprecationWarning)
        return evloop.run(run_all(opts))


def validate(opts: Options) -> None:
    if opts.turns < FROM_TURN:
        raise ValueError(f"--turns must be at least {FROM_TURN}")
    if opts.switch_turn and opts.switch_turn < 2:
        raise ValueError("--switch-turn must be 0 (none) or at least 2")
    latchable = DEFAULT_LATCHED_BETAS
    for turn, betas in opts.toggles.items():
        if turn < 2:
            raise ValueError("a beta can only be toggled off from turn 2 (turn 1 must send it to latch it)")
        for beta in betas:
            if beta not in latchable:
                raise ValueError(f"{beta} is not latched by default: the gateway is not meant to keep it")


def parse_toggles(raw: str) -> dict[int, tuple[str, ...]]:
    """``"4:beta-a,5:beta-a,8:beta-b"`` -> ``{4: ("beta-a",), 5: ("beta-a",), 8: ("beta-b",)}``."""
    toggles: dict[int, list[str]] = {}
    for item in (i.strip() for i in raw.split(",")):
        if not item:
            continue
        turn, sep, beta = item.partition(":")
        if not sep or not turn.strip().isdigit() or not beta.strip():
            raise argparse.ArgumentTypeError(f"expected TURN:BETA items, got {item!r}")
        toggles.setdefault(int(turn), []).append(beta.strip())
    return {k: tuple(v) for k, v in toggles.items()}


def _providers(raw: str) -> list[str]:
    values = [v.strip() for v in raw.split(",") if v.strip()]
    if not values or any(v not in PROVIDERS for v in values):
        raise argparse.ArgumentTypeError(f"expected a comma-separated subset of {','.join(PROVIDERS)}")
    return values


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m gateway.bench.cache_efficiency",
        description="Prompt-cache efficiency of a Claude Code session through the gateway, per upstream "
        "emulator: cache share, gateway-caused cache breaks, break classification, beta latching.",
    )
    p.add_argument("--turns", type=int, default=DEFAULT_TURNS, help=f"model turns (default {DEFAULT_TURNS})")
    p.add_argument("--providers", type=_providers, default=list(PROVIDERS), help=",".join(PROVIDERS))
    p.add_argument(
        "--switch-turn",
        type=int,
        default=DEFAULT_SWITCH_TURN,
        help=f"turn that switches the model (the next one switches back); 0: none (default {DEFAULT_SWITCH_TURN})",
    )
    p.add_argument("--switch-model", default=DEFAULT_SWITCH_MODEL, help=f"default {DEFAULT_SWITCH_MODEL}")
    p.add_argument(
        "--toggles",
        type=parse_toggles,
        default=dict(DEFAULT_TOGGLES),
        help="TURN:BETA,... betas the client leaves out of anthropic-beta on those turns "
        "(default: context-management on 4,5,11,22,24; effort on 8,11,16,27)",
    )
    p.add_argument("--fixture", type=Path, default=DEFAULT_FIXTURE, help="captured Claude Code first turn")
    p.add_argument("--json", dest="json_out", help="also write the report as JSON to this file")
    p.add_argument("--per-turn", action="store_true", help="also print every turn")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    opts = Options(
        turns=a.turns,
        providers=a.providers,
        switch_turn=a.switch_turn,
        switch_model=a.switch_model,
        toggles=a.toggles,
        fixture=a.fixture,
        json_out=a.json_out,
        per_turn=a.per_turn,
    )
    try:
        report = run(opts)
    except (ValueError, RuntimeError, anthropic.APIError) as exc:
        print(f"cache efficiency bench failed: {exc}", file=sys.stderr)
        return 1
    print(report.render(per_turn=opts.per_turn))
    if opts.json_out:
        Path(opts.json_out).write_bytes(orjson.dumps(report.as_dict(), option=orjson.OPT_INDENT_2))
        print(f"results written to {opts.json_out}", file=sys.stderr)
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
