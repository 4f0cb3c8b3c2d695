"""Prompt-cache efficiency of a long Claude Code session through the gateway, per upstream.

``python -m bench.cache_efficiency [--turns 30] [--providers anthropic,bedrock,vertex,foundry]
[--json OUT] [--per-turn]``

For each provider: its emulator (:func:`~emulators.upstreams.emulated_upstream`, fixture
credentials, the emulator's prompt-cache model), an in-process gateway in front of it
(``create_app(Settings.from_environ({"GATEWAY_API_KEYS": ..., **upstream.env}))`` served by
:func:`gateway.process.running`), and the real ``anthropic`` SDK (``AsyncAnthropic``, streaming)
replaying a Claude Code session built from fixture 015 (:mod:`bench.cc_session`): its
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
import sys
import tempfile
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import aiohttp
import anthropic
import orjson

from bench import evloop
from bench.cache_report import (
    BILLING_IN_KEY,
    BOOKKEEPING_TIMEOUT_S,
    CLIENT_KEY,
    DEFAULT_SWITCH_MODEL,
    DEFAULT_SWITCH_TURN,
    DEFAULT_TOGGLES,
    DEFAULT_TURNS,
    FALLBACK_TOOL,
    FROM_TURN,
    Options,
    ProviderResult,
    Report,
    TurnRecord,
)
from bench.cc_session import DEFAULT_FIXTURE, ClaudeCodeSession
from bench.cc_turn import stream_turn
from bench.upstream_prefix import (
    PromptTokens,
    UpstreamPrefix,
    is_messages_request,
    prefix_changes,
)
from emulators.runner import RunningEmulator
from emulators.upstreams import PROVIDERS, emulated_upstream
from gateway.app import create_app
from gateway.cache.latches import DEFAULT_LATCHED_BETAS
from gateway.config import ProviderName, Settings
from gateway.metrics import GatewayMetrics
from gateway.process import running
from gateway.providers.betas import BetaPolicy

# --- the run --------------------------------------------------------------------------------------


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


def _policy(settings: Settings) -> BetaPolicy:
    return BetaPolicy.from_settings(settings.models.beta_policy)


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
    policy, upstream = _policy(settings), ProviderName(provider)
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
            final, _ = await stream_turn(
                client, session, model, session.headers(dropped, emulator_headers), query={"beta": "true"}
            )
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
                    latch_expected=[b for b in dropped if policy.keeps(upstream, b, session.other_fields)],
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
        prog="python -m bench.cache_efficiency",
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
