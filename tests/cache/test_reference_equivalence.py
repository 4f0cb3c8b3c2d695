"""The cheap cache step gives what the straightforward one gave (tests/cache/reference.py): the same
prefix hashes for any payload and for any session turn after turn (history hashes reused or not),
the same normalised bodies, the same breakpoints when only the messages that can hold a marker are
walked."""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass
from typing import Any

import orjson
from hypothesis import event, given, reject, settings
from hypothesis import strategies as st

from gateway.cache.breakpoints import locate_breakpoints
from gateway.cache.canonical import without_markers
from gateway.cache.history import scan_messages
from gateway.cache.latches import Latches
from gateway.cache.normalise import CacheRules, normalise
from gateway.cache.pipeline import CachePipeline
from gateway.cache.prefix import PrefixHashes, prefix_hashes
from gateway.cache.session_store import MemorySessionStore
from gateway.config import Settings
from gateway.providers.base import ClientRequest, Operation
from gateway.streaming.usage import Usage
from tests.cache import reference
from tests.cache.test_canonical import JSON, MARKER_VALUES, TEXT

BETAS = ["context-1m-2025-08-07"]
NORMAL_MARKERS = st.sampled_from(
    [
        {"type": "ephemeral"},
        {"type": "ephemeral", "ttl": "1h"},
        {"type": "ephemeral", "ttl": "5m"},
        {"type": "ephemeral", "scope": "global"},
        {"type": "ephemeral", "ttl": "1h", "scope": "global"},
    ]
).map(dict)
MARKERS = NORMAL_MARKERS | NORMAL_MARKERS | MARKER_VALUES  # hostile values (any JSON) too


def _marked(block: dict[str, Any], control: Any) -> dict[str, Any]:
    return block if control is None else {**block, "cache_control": control}


def blocks(depth: int = 2) -> st.SearchStrategy[Any]:
    """Content blocks, markers anywhere (nested tool_result / search_result content included)."""
    marker = st.none() | st.none() | MARKERS
    text = st.builds(lambda t, c: _marked({"type": "text", "text": t}, c), TEXT, marker)
    tool_use = st.builds(
        lambda i, c: _marked({"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": i}, c),
        st.dictionaries(st.sampled_from(["command", "cache_control", "content"]), JSON, max_size=2),
        marker,
    )
    options = [text, text, tool_use, JSON]  # and whatever else a client sends
    if depth:
        nested = st.lists(blocks(depth - 1), max_size=3)
        options.append(
            st.builds(
                lambda content, c: _marked(
                    {"type": "tool_result", "tool_use_id": "t", "content": content}, c
                ),
                TEXT | nested,
                marker,
            )
        )
        options.append(
            st.builds(
                lambda content, c: _marked({"type": "search_result", "source": "s", "content": content}, c),
                nested,
                marker,
            )
        )
    return st.one_of(*options)


MESSAGES = st.builds(
    lambda role, content, extra: {"role": role, "content": content, **extra},
    st.sampled_from(["user", "assistant", "system"]),
    TEXT | st.lists(blocks(), max_size=3),
    st.dictionaries(st.just("cache_control"), MARKERS, max_size=1),  # a marker on the message itself
)
BILLING = st.builds(
    lambda cch, c: _marked(
        {"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1; cch={cch};"}, c
    ),
    st.sampled_from(["70e58", "00000", "b67de", "xyz"]),
    st.none() | NORMAL_MARKERS,
)
SYSTEM = (
    st.none()
    | TEXT
    | st.builds(
        lambda head, rest: head + rest, st.lists(BILLING, max_size=1), st.lists(blocks(1), max_size=3)
    )
)
TOOLS = st.lists(
    st.builds(
        lambda name, schema, c: _marked({"name": name, "input_schema": schema}, c),
        TEXT,
        st.dictionaries(st.sampled_from(["type", "properties", "cache_control"]), JSON, max_size=2),
        st.none() | MARKERS,
    )
    | JSON,
    max_size=3,
)


@st.composite
def payloads(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {"model": draw(st.sampled_from(["claude-opus-4-8", "m"])), "max_tokens": 16}
    if draw(st.booleans()):
        body["tools"] = draw(TOOLS)
    system = draw(SYSTEM)
    if system is not None:
        body["system"] = system
    body["messages"] = draw(
        st.lists(MESSAGES | JSON, max_size=5) if draw(st.booleans()) else st.lists(MESSAGES, max_size=6)
    )
    if draw(st.integers(0, 3)) == 0:
        body["cache_control"] = draw(MARKERS)
    return copy.deepcopy(body)  # no object shared between two places, as in a parsed request


@settings(max_examples=200, deadline=None)
@given(payloads())
def test_prefix_hashes_match_the_reference(payload: dict[str, Any]) -> None:
    expected = reference.prefix_hashes(payload, BETAS)
    assert prefix_hashes(payload, BETAS) == expected
    # the same with a scan taken at any split, and with the hashes as their own previous request
    for settled in (None, 0, 1, 3):
        scan = scan_messages(payload, settled)
        assert prefix_hashes(payload, BETAS, scan=scan) == expected
    again = prefix_hashes(payload, BETAS, previous=prefix_hashes(payload, BETAS))
    assert again == expected and again.history_check == expected_check(payload)


def expected_check(payload: dict[str, Any]) -> str:
    """SHA-256 of the JSON of every message but the last, markers left out ("" when there is none,
    or when orjson cannot encode them, even if only a marker holds what it cannot encode): what
    the next request compares its history with."""
    messages = payload.get("messages")
    if not isinstance(messages, list) or not messages:
        return ""
    try:
        orjson.dumps(messages[:-1])
    except orjson.JSONEncodeError:
        return ""
    return hashlib.sha256(orjson.dumps(reference._strip_markers(messages[:-1]))).hexdigest()


@settings(max_examples=100, deadline=None)
@given(payloads())
def test_breakpoints_of_the_marked_messages_are_all_of_them(payload: dict[str, Any]) -> None:
    scan = scan_messages(payload)
    assert locate_breakpoints(payload, messages=scan.marked) == locate_breakpoints(payload)


@settings(max_examples=200, deadline=None)
@given(
    payloads(),
    st.sampled_from(["anthropic", "bedrock", "vertex", "foundry"]),
    st.sampled_from([None, True, False]),
    st.sampled_from([None, True, False]),
    st.booleans(),
)
def test_normalise_matches_the_reference(
    payload: dict[str, Any], provider: str, ttl_1h: bool | None, global_scope: bool | None, auto: bool
) -> None:
    rules = CacheRules(provider, normalise_billing_header=provider in ("bedrock", "vertex"), auto_cache=auto)
    latches = Latches(ttl_1h=ttl_1h, global_scope=global_scope)
    original = copy.deepcopy(payload)
    expected = reference.normalise(payload, rules, latches)
    for marked in (None, scan_messages(payload).marked):
        result = normalise(payload, rules, latches, marked=marked)
        assert (result.payload, result.changed, result.notes) == (
            expected.payload,
            expected.changed,
            expected.notes,
        )
        assert wire(result.payload) == wire(expected.payload)  # key order too
        assert payload == original  # the client's body is never modified
        if not result.changed:
            assert result.payload is payload  # nothing copied


def wire(payload: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(payload)
    except orjson.JSONEncodeError:  # a hostile marker value orjson cannot encode
        return repr(payload).encode()


# -- sessions, turn after turn ----------------------------------------------------------------------


@dataclass
class Conversation:
    """A client's session: its history (without breakpoints) and what it sends each turn."""

    system: Any
    history: list[dict[str, Any]]

    def request(self, marker: Any) -> dict[str, Any]:
        """The next request: the history with ``marker`` on the last block of the last message
        (a string content stays a string when there is no marker to put on it)."""
        messages = copy.deepcopy(self.history)
        if messages and marker is not None:
            last = messages[-1]
            content = last["content"]
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
            if blocks and isinstance(blocks[-1], dict):
                blocks[-1] = {**blocks[-1], "cache_control": marker}
                last["content"] = blocks
        body: dict[str, Any] = {"model": "claude-opus-4-8", "max_tokens": 16, "messages": messages}
        if self.system is not None:
            body["system"] = copy.deepcopy(self.system)
        return body


STEP = st.sampled_from(
    ["append", "append", "append", "same", "edit", "compact", "flip", "older_marker", "system"]
)


@st.composite
def sessions(draw: st.DrawFn) -> list[dict[str, Any]]:
    """The requests of a session: the history mostly grows, sometimes it is edited, compacted,
    rewritten between string and block content, or an older message gets a marker of its own."""
    conversation = Conversation(draw(SYSTEM), draw(st.lists(MESSAGES, min_size=1, max_size=3)))
    turns = []
    for _ in range(draw(st.integers(2, 7))):
        step = draw(STEP)
        history = conversation.history
        if step == "append":
            history.extend(draw(st.lists(MESSAGES, min_size=1, max_size=3)))
        elif step == "edit" and history:
            index = draw(st.integers(0, len(history) - 1))
            history[index] = {**history[index], "content": draw(TEXT)}
        elif step == "compact":
            conversation.history = [{"role": "user", "content": draw(TEXT)}]
        elif step == "flip" and history:
            index = draw(st.integers(0, len(history) - 1))
            content = history[index]["content"]
            if isinstance(content, str):
                history[index] = {**history[index], "content": [{"type": "text", "text": content}]}
            elif len(content) == 1 and isinstance(content[0], dict) and content[0].get("type") == "text":
                history[index] = {**history[index], "content": content[0].get("text")}
        elif step == "older_marker" and history:
            index = draw(st.integers(0, len(history) - 1))
            history[index] = {
                **history[index],
                "content": [{"type": "text", "text": "x", "cache_control": draw(MARKERS)}],
            }
        elif step == "system":
            conversation.system = draw(SYSTEM)
        turns.append(conversation.request(draw(st.none() | NORMAL_MARKERS | MARKERS)))
    return turns


@settings(max_examples=100, deadline=None)
@given(sessions())
def test_a_session_turn_after_turn_hashes_as_the_reference(turns: list[dict[str, Any]]) -> None:
    previous: PrefixHashes | None = None
    previous_messages: list[Any] = []
    for payload in turns:  # fresh objects every request, as parsed by the server
        settled = len(previous.messages) - 1 if previous is not None else None
        current = prefix_hashes(payload, BETAS, previous=previous, scan=scan_messages(payload, settled))
        assert current == reference.prefix_hashes(payload, BETAS)
        event("history reused" if previous is not None and reused(previous, current) else "history hashed")
        if previous is not None and reused(previous, current):
            # reused, not recomputed: only when the previous request's messages but its last
            # are unchanged (markers aside)
            shared = len(previous.messages) - 1
            assert without_markers(payload["messages"][:shared]) == without_markers(
                previous_messages[:shared]
            )
        previous, previous_messages = current, payload["messages"]


def reused(previous: PrefixHashes, current: PrefixHashes) -> bool:
    shared = len(previous.messages) - 1
    return shared > 0 and all(
        a is b for a, b in zip(previous.messages[:shared], current.messages, strict=False)
    )


@settings(max_examples=60, deadline=None)
@given(sessions(), st.sampled_from(["anthropic", "bedrock"]), st.booleans())
async def test_a_session_through_the_pipeline_is_sent_and_hashed_as_the_reference(
    turns: list[dict[str, Any]], provider: str, auto_cache: bool
) -> None:
    """normalise (copy-on-write), the scan of the body it edited and the history reuse together:
    each turn's body is the reference's normalisation and its hashes the reference's hashes."""
    settings_ = Settings.from_environ({"ANTHROPIC_API_KEY": "k", "GATEWAY_AUTO_CACHE": str(int(auto_cache))})
    rules = CacheRules(provider, normalise_billing_header=provider == "bedrock", auto_cache=auto_cache)
    pipeline = CachePipeline(settings_.cache, provider, MemorySessionStore(10, 3600), on_break=lambda reason: None)
    headers = [("x-session-id", "s1"), ("anthropic-beta", "context-1m-2025-08-07,other-beta")]
    for body in turns:
        try:
            raw = orjson.dumps(body)
        except orjson.JSONEncodeError:
            reject()  # a parsed request holds nothing orjson cannot encode
        client = ClientRequest(Operation.MESSAGES, raw, orjson.loads(raw), headers, "r")
        sent, context = await pipeline.before(client, "default")
        expected = reference.normalise(client.payload, rules, context.latches)
        assert sent.payload == expected.payload
        assert sent.body == (raw if sent.payload is client.payload else orjson.dumps(expected.payload))
        assert (sent.payload is client.payload) is not expected.changed  # the client's bytes, or a copy
        assert context.hashes == reference.prefix_hashes(sent.payload, ["context-1m-2025-08-07"])
        pipeline.after(context, Usage(cache_read_input_tokens=10, cache_write_5m_tokens=10), 200, provider)
