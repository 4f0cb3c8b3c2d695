"""CachePipeline without HTTP: what ``before`` sends and what ``after`` concludes, turn by turn."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from emulators.clock import ManualClock
from gateway.cache.pipeline import CachePipeline
from gateway.cache.session_store import MemorySessionStore
from gateway.config import Settings
from gateway.providers.base import ClientRequest, Operation
from gateway.streaming.usage import Usage
from tests.support.cache_turns import TOOL_BASH, Turn

SESSION = "e7ef4113-2efc-4c9e-9196-6e8446c0db6e"  # the tool-bash capture's session
LATCHED = "interleaved-thinking-2025-05-14"
TEAM = "default"


class Harness:
    def __init__(self, provider: str = "anthropic", **env: str) -> None:
        self.settings = Settings.from_environ({"ANTHROPIC_API_KEY": "k", **env})
        self.clock = ManualClock(1_800_000_000.0)
        self.breaks: list[str] = []
        self.store = MemorySessionStore(100, 3600, clock=self.clock.time)
        self.pipeline = CachePipeline(
            self.settings.cache, provider, self.store, on_break=self.breaks.append, clock=self.clock.time
        )

    async def turn(self, turn: Turn, read: int, written: int = 100) -> tuple[ClientRequest, str | None]:
        client = request(turn)
        sent, context = await self.pipeline.before(client, TEAM)
        usage = Usage(input_tokens=5, cache_read_input_tokens=read, cache_write_5m_tokens=written)
        return sent, self.pipeline.after(context, usage, 200, "anthropic")


def request(turn: Turn, operation: Operation = Operation.MESSAGES) -> ClientRequest:
    return ClientRequest(operation, turn.wire(), turn.body, list(turn.headers), "req-1")


def beta_header(client: ClientRequest) -> list[str]:
    return [b for k, v in client.headers if k.lower() == "anthropic-beta" for b in v.split(",")]


@pytest.fixture
def turns() -> Iterator[list[Turn]]:
    yield [Turn.load(name) for name in TOOL_BASH]


async def test_an_untouched_request_is_the_clients_object(turns: list[Turn]) -> None:
    harness = Harness()
    client = request(turns[0])
    sent, context = await harness.pipeline.before(client, TEAM)
    assert sent is client  # the client's bytes, not a re-serialisation
    assert context.session_id == SESSION and context.notes == ()


async def test_a_dropped_latched_beta_is_sent_and_breaks_are_named_by_what_changed(turns: list[Turn]) -> None:
    """Turn 2 and 3 drop a latched beta; turn 3 also changes the system prompt. The upstream saw
    the same betas on every turn, so the break is the system prompt, not the betas."""
    harness = Harness()
    _, reason = await harness.turn(turns[0], read=0, written=17_450)
    assert reason == "first_request"
    second, reason = await harness.turn(turns[1].without_betas(LATCHED), read=17_450, written=1_558)
    assert reason is None
    assert beta_header(second) == [*turns[1].without_betas(LATCHED).betas, LATCHED]
    third_turn = turns[2].without_betas(LATCHED)
    third_turn.body["system"][2]["text"] += " Be terse."
    third, reason = await harness.turn(third_turn, read=1_200, written=18_000)
    assert LATCHED in beta_header(third)
    assert reason == "system_changed"
    assert harness.breaks == ["first_request", "system_changed"]


async def test_a_side_call_without_breakpoints_leaves_the_session_record_alone(turns: list[Turn]) -> None:
    harness = Harness()
    await harness.turn(turns[0], read=0, written=17_450)
    title = Turn.load("074_cc_interactive_title_generation").with_session(SESSION)
    title.set_header("anthropic-beta", turns[0].header("anthropic-beta"))  # as in its own session
    _, reason = await harness.turn(title, read=0, written=0)
    assert reason is None
    edited = turns[1].copy()
    edited.body["messages"][0]["content"][-1]["text"] = "run echo bye"
    _, reason = await harness.turn(edited, read=16_000)
    assert reason == "messages_edited"  # compared with turn 1, not with the side call


async def test_a_side_call_first_does_not_decide_the_ttl_and_scope() -> None:
    harness = Harness()
    main = Turn.load("025_cc_firstparty_1h_turn1")
    session = main.header("X-Claude-Code-Session-Id")
    title = Turn.load("074_cc_interactive_title_generation").with_session(session)
    await harness.turn(title, read=0, written=0)
    sent, _ = await harness.turn(main, read=0)
    assert sent.body == main.wire()  # 1h ttl and global scope kept: nothing rewritten
    later = Turn.load("026_cc_firstparty_1h_turn2")
    for block in later.body["system"][1:]:
        block.pop("cache_control", None)  # the client stops asking for the hour and the scope
    later.body["messages"][-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    sent, _ = await harness.turn(later, read=0)
    assert sent.payload["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}


async def test_no_session_means_no_latching_and_no_record(turns: list[Turn]) -> None:
    harness = Harness()
    await harness.turn(turns[0].copy().with_session(None), read=0)
    sent, reason = await harness.turn(turns[1].copy().with_session(None).without_betas(LATCHED), read=0)
    assert LATCHED not in beta_header(sent) and reason is None
    assert len(harness.store) == 0 and harness.breaks == []


async def test_count_tokens_normalises_without_touching_latches(turns: list[Turn]) -> None:
    harness = Harness("vertex")
    first_party = Turn.load("025_cc_firstparty_1h_turn1")
    counted = harness.pipeline.normalise_only(request(first_party, Operation.COUNT_TOKENS))
    assert "cch=00000;" in counted.payload["system"][0]["text"]
    assert "scope" not in str(counted.payload)
    assert len(harness.store) == 0
    plain = request(turns[0], Operation.COUNT_TOKENS)
    assert harness.pipeline.normalise_only(plain) is plain


async def test_failed_requests_are_not_recorded(turns: list[Turn]) -> None:
    harness = Harness()
    await harness.turn(turns[0], read=0, written=17_450)
    _, context = await harness.pipeline.before(request(turns[1]), TEAM)
    assert harness.pipeline.after(context, Usage(), 529, "anthropic") is None
    view = harness.store.view(TEAM, SESSION)
    assert view is not None and view.previous is not None
    assert len(view.previous.hashes.messages) == 2  # still turn 1


async def test_the_upstreams_own_miss_reason_is_recorded_beside_ours(turns: list[Turn]) -> None:
    harness = Harness()
    await harness.turn(turns[0], read=0)
    client = request(turns[1])
    _, context = await harness.pipeline.before(client, TEAM)
    usage = Usage(
        input_tokens=5,
        cache_read_input_tokens=0,
        cache_write_5m_tokens=100,
        cache_miss_reason="previous_message_not_found",
    )
    reason = harness.pipeline.after(context, usage, 200, "anthropic")
    assert reason == "unknown"  # nothing changed in the prefix: only the upstream knows why
    view = harness.store.view(TEAM, SESSION)
    assert view is not None
    assert view.recent_breaks[-1].upstream_reason == "previous_message_not_found"


def test_the_observer_reads_diagnostics() -> None:
    from gateway.streaming.sse import encode_event
    from gateway.streaming.usage import StreamObserver, usage_from_message

    message = {
        "usage": {"input_tokens": 1, "output_tokens": 1},
        "diagnostics": {"cache_miss_reason": "tools_changed"},
    }
    observer = StreamObserver()
    observer.feed(encode_event("message_start", {"type": "message_start", "message": message}))
    assert observer.usage.cache_miss_reason == "tools_changed"
    import orjson

    assert usage_from_message(orjson.dumps(message))[0].cache_miss_reason == "tools_changed"
