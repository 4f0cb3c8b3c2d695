"""Properties of normalisation over generated requests (breakpoints on tools, system, messages,
nested tool_result content and the top level, in any mix of TTLs and scopes)."""

from __future__ import annotations

import copy
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from emulators import EmulatorConfig
from emulators.errors import ApiError
from emulators.validation import validate_body
from gateway.cache.breakpoints import MAX_CACHE_BREAKPOINTS, locate_breakpoints
from gateway.cache.latches import DEFAULT_LATCHED_BETAS, Latches, observe
from gateway.cache.normalise import CacheRules, normalise
from gateway.cache.pipeline import CachePipeline
from gateway.cache.prefix import prefix_hashes
from gateway.cache.session_store import MemorySessionStore
from gateway.config import Settings
from gateway.providers.base import ClientRequest, Operation
from gateway.streaming.usage import Usage
from tests.cache.test_breakpoints import Built, requests

EMULATOR = EmulatorConfig()
KEYS = [
    "model",
    "system",
    "messages",
    "tools",
    "content",
    "cache_control",
    "role",
    "type",
    "text",
    "ttl",
    "scope",
    "metadata",
    "user_id",
]
OPTIONAL_BOOL = st.sampled_from([None, True, False])


def sendable(body: dict[str, Any]) -> dict[str, Any]:
    """The generated body completed into a Messages request (the strategy builds only the prompt)."""
    full = {"model": "claude-opus-4-8", "max_tokens": 16, **copy.deepcopy(body)}
    for tool in full.get("tools", []):
        tool.setdefault("input_schema", {"type": "object"})
    if not full["messages"]:
        full["messages"] = [{"role": "user", "content": "hi"}]
    return full


def scopes(body: dict[str, Any]) -> set[Any]:
    found: set[Any] = set()

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("cache_control"), dict):
                found.add(node["cache_control"].get("scope"))
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(body)
    return found


def hashes_without_ttls(body: dict[str, Any]) -> tuple[Any, ...]:
    h = prefix_hashes(body, [])
    return (h.model, h.tools, h.system, h.messages, h.first_message)


@settings(max_examples=300, deadline=None)
@given(
    requests(),
    st.sampled_from(["anthropic", "bedrock", "vertex", "foundry"]),
    OPTIONAL_BOOL,
    OPTIONAL_BOOL,
    st.booleans(),
)
def test_normalised_requests_are_what_the_upstream_accepts(
    built: Built, provider: str, ttl_1h: bool | None, global_scope: bool | None, auto_cache: bool
) -> None:
    body = sendable(built.body)
    original = copy.deepcopy(body)
    rules = CacheRules(
        provider, normalise_billing_header=provider in ("bedrock", "vertex"), auto_cache=auto_cache
    )
    latches = Latches(ttl_1h=ttl_1h, global_scope=global_scope)
    result = normalise(body, rules, latches)
    sent = result.payload

    assert body == original  # the client's body is never modified
    try:  # at most 4 breakpoints, 1h ones before 5m ones (what the emulator enforces, as the API)
        validate_body(sent, "messages", EMULATOR)
    except ApiError as exc:  # pragma: no cover - the assertion's message
        raise AssertionError(f"{exc}: {sent}") from exc
    located = locate_breakpoints(sent)
    assert len(located) <= MAX_CACHE_BREAKPOINTS
    if provider != "anthropic" or global_scope is False:
        assert "global" not in scopes(sent)
    if ttl_1h is True:
        assert {b.ttl for b in located} <= {"1h"}
    if ttl_1h is False:
        assert {b.ttl for b in located} <= {"5m"}
    if auto_cache and not locate_breakpoints(original) and "cache_control" not in original:
        assert 1 <= len(located) <= 2
    # normalisation only ever touches markers: the prefix the cache keys on is the client's
    assert hashes_without_ttls(sent) == hashes_without_ttls(original)
    # and it is idempotent: a normalised body goes through untouched
    again = normalise(sent, rules, latches)
    assert not again.changed and again.payload == sent
    assert result.changed == (sent != original)


@settings(max_examples=200, deadline=None)
@given(requests())
def test_a_session_latched_from_its_first_request_keeps_its_ttls(built: Built) -> None:
    """Latching a request's own eligibilities and applying them changes none of its TTLs (but
    the 5m-before-1h upgrade, which the upstream would otherwise refuse)."""
    body = sendable(built.body)
    latches = observe(body, [], DEFAULT_LATCHED_BETAS)
    plain = normalise(body, CacheRules("anthropic", False, False), Latches())
    latched = normalise(body, CacheRules("anthropic", False, False), latches)
    if latches.ttl_1h is not True:
        assert latched.payload == plain.payload
    else:
        assert {b.ttl for b in locate_breakpoints(latched.payload)} == {"1h"}


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**31), 2**31) | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.sampled_from(KEYS), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(KEYS), JSON, max_size=6), st.booleans())
async def test_any_payload_shape_goes_through_the_pipeline(payload: dict[str, Any], auto_cache: bool) -> None:
    """Whatever the client sends (the upstream judges it), the cache step never raises."""
    settings_ = Settings.from_environ({"ANTHROPIC_API_KEY": "k", "GATEWAY_AUTO_CACHE": str(int(auto_cache))})
    pipeline = CachePipeline(settings_.cache, "bedrock", MemorySessionStore(10, 60), on_break=lambda reason: None)
    headers = [("x-session-id", "s"), ("anthropic-beta", "context-1m-2025-08-07")]
    client = ClientRequest(Operation.MESSAGES, orjson.dumps(payload), payload, headers, "r")
    for _ in range(2):
        sent, context = await pipeline.before(client, "default")
        pipeline.after(context, Usage(cache_read_input_tokens=1), 200, "bedrock")
        pipeline.normalise_only(client)
    assert sent.payload is not None
