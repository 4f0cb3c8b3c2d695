"""Router order, weights and affinity; breaker states on an injected clock; thinking blocks on a move
between providers. Pure units: no network."""

from __future__ import annotations

import collections

import orjson

from gateway.providers.base import ClientRequest, Operation
from gateway.upstreams.affinity import Placement, PlacementMap
from gateway.upstreams.breaker import BreakerBoard, BreakerState
from gateway.upstreams.config import (
    AffinityOptions,
    BreakerOptions,
    FailoverOptions,
    ProbeOptions,
    Route,
    UpstreamsConfig,
)
from gateway.upstreams.router import Router
from gateway.upstreams.signatures import strip_thinking


def _config(routes: tuple[Route, ...], return_after_s: float | None = 300.0) -> UpstreamsConfig:
    from gateway.config import Settings
    from gateway.provider_names import ProviderName
    from gateway.upstreams.config import UpstreamSpec

    settings = Settings.from_environ({})
    specs = tuple(UpstreamSpec(n, ProviderName.ANTHROPIC, settings) for n in ("a", "b", "c"))
    return UpstreamsConfig(
        specs,
        routes,
        AffinityOptions(return_after_s=return_after_s),
        BreakerOptions(),
        FailoverOptions(),
        ProbeOptions(),
    )


def everything(_: str) -> bool:
    return True


def test_first_matching_route_else_every_upstream_in_file_order() -> None:
    router = Router(_config((Route(("claude-opus-*", "opus"), ("c", "a"), None),)))
    assert router.plan("claude-opus-5-5", None, None, everything, 0).candidates == ("c", "a")
    assert router.plan("opus", None, None, everything, 0).candidates == ("c", "a")
    plan = router.plan("claude-haiku-4-5", None, None, everything, 0)
    assert (plan.candidates, plan.reason) == (("a", "b", "c"), "route")


def test_weights_spread_new_sessions_the_same_way_on_every_replica() -> None:
    config = _config((Route(("*",), ("a", "b"), (3.0, 1.0)),))
    first, second = Router(config), Router(config)
    firsts = collections.Counter(
        first.plan("m", f"session-{i}", None, everything, 0).candidates[0] for i in range(2000)
    )
    assert 0.7 < firsts["a"] / 2000 < 0.8  # 3:1
    for i in range(50):  # a hash of the session id, not a random draw: replicas agree
        assert first.plan("m", f"s{i}", None, everything, 0) == second.plan("m", f"s{i}", None, everything, 0)
    assert Router(config).plan("m", "x", None, everything, 0).reason == "weighted"


def test_long_model_names_are_routed_but_never_kept() -> None:
    """A client's model field may be megabytes long: the route cache held up to 1,024 of them."""
    router = Router(_config((Route(("claude-opus-*",), ("c",), None),)))
    for index in range(20):
        name = f"claude-opus-{index}-" + "x" * 100_000
        assert router.plan(name, None, None, everything, 0).candidates == ("c",)
    assert router.plan("claude-opus-5-5", None, None, everything, 0).candidates == ("c",)
    assert list(router._cache) == ["claude-opus-5-5"]


def test_affinity_keeps_a_moved_session_until_its_cache_would_have_expired() -> None:
    router = Router(_config((Route(("*",), ("a", "b"), None),), return_after_s=300))
    moved = Placement("b", at=1000.0)
    plan = router.plan("m", "s", moved, everything, 1100.0)
    assert (plan.candidates, plan.reason, plan.home) == (("b", "a"), "affinity", "b")
    plan = router.plan("m", "s", moved, everything, 1300.0)  # idle for the cache TTL: back to a
    assert (plan.candidates, plan.reason) == (("a", "b"), "return")
    plan = router.plan("m", "s", moved, lambda n: n != "a", 1300.0)  # a is not back yet
    assert (plan.candidates[0], plan.reason) == ("b", "affinity")
    never = Router(_config((Route(("*",), ("a", "b"), None),), return_after_s=None))
    assert never.plan("m", "s", moved, everything, 10**9).candidates[0] == "b"


def test_open_breakers_are_left_out() -> None:
    router = Router(_config((Route(("*",), ("a", "b"), None),)))
    plan = router.plan("m", "s", Placement("a", 0.0), lambda n: n != "a", 1.0)
    assert (plan.candidates, plan.reason, plan.skipped, plan.home) == (("b",), "breaker_open", ("a",), "a")
    assert router.plan("m", "s", None, lambda n: False, 1.0).candidates == ()


async def test_breaker_opens_half_opens_and_closes_on_the_injected_clock() -> None:
    now = [0.0]
    changes: list[tuple[str, BreakerState]] = []
    board = BreakerBoard(
        ["a"],
        BreakerOptions(failures=3, window_s=10, open_s=30, half_open_probes=1),
        clock=lambda: now[0],
        on_change=lambda n, s: changes.append((n, s)),
    )
    await board.failure("a")
    await board.failure("a")
    now[0] = 11.0  # the first two left the window
    await board.failure("a")
    assert board.state("a") is BreakerState.CLOSED
    await board.failure("a")
    await board.failure("a")
    assert board.state("a") is BreakerState.OPEN and not await board.acquire("a")
    assert board.retry_after(["a"]) == 30.0
    now[0] += 30
    assert board.state("a") is BreakerState.HALF_OPEN
    assert await board.acquire("a") and not await board.acquire("a")  # one probe at a time
    await board.failure("a")
    assert board.state("a") is BreakerState.OPEN  # the probe failed: open again
    now[0] += 30
    assert await board.acquire("a")
    await board.success("a")
    assert board.state("a") is BreakerState.CLOSED and await board.acquire("a")
    assert [s for _, s in changes] == [
        BreakerState.OPEN,
        BreakerState.HALF_OPEN,
        BreakerState.OPEN,
        BreakerState.HALF_OPEN,
        BreakerState.CLOSED,
    ]


async def test_placements_are_bounded_and_expire() -> None:
    now = [0.0]
    placements = PlacementMap(max_sessions=2, idle_s=100, clock=lambda: now[0])
    for session in ("s1", "s2", "s3"):
        await placements.put("t", session, Placement("a", now[0]))
    assert len(placements) == 2 and await placements.get("t", "s1") is None
    assert await placements.get("other-team", "s2") is None
    now[0] = 101
    assert await placements.get("t", "s2") is None


async def test_one_team_cannot_push_out_another_teams_placements() -> None:
    """Team B's 300 sessions took every one of 50 places, and team A's session went back to the
    first upstream in route order, on a cold cache, without a move being counted."""
    placements = PlacementMap(max_sessions=50, idle_s=100, clock=lambda: 0.0, teams=lambda: 2)
    await placements.put("team-a", "a-1", Placement("good", 0.0))
    for i in range(300):
        await placements.put("team-b", f"b-{i}", Placement("good", 0.0))
    assert await placements.get("team-a", "a-1") == Placement("good", 0.0)
    assert len(placements) == 26  # team B keeps its share, 25, its most recent ones
    assert (
        await placements.get("team-b", "b-299") is not None
        and await placements.get("team-b", "b-274") is None
    )


def _request(payload: dict[str, object]) -> ClientRequest:
    return ClientRequest(Operation.MESSAGES, orjson.dumps(payload), payload, [], "req_1")


def test_thinking_blocks_left_out_and_thinking_off_when_the_last_turn_loses_its_lead() -> None:
    thinking = {"type": "thinking", "thinking": "hmm", "signature": "sig-from-first-party"}
    payload: dict[str, object] = {
        "model": "m",
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [thinking, {"type": "text", "text": "hello"}]},
            {"role": "user", "content": "use a tool"},
            {
                "role": "assistant",
                "content": [thinking, {"type": "tool_use", "id": "t", "name": "x", "input": {}}],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]},
        ],
    }
    stripped, removed = strip_thinking(_request(payload))
    assert removed == 2
    assert b"sig-from-first-party" not in stripped.body
    assert "thinking" not in stripped.payload  # the last assistant turn no longer starts with thinking
    unchanged = _request({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert strip_thinking(unchanged) == (unchanged, 0)
    # only the messages from before a move: the tool loop's turn after it keeps its thinking
    kept, removed = strip_thinking(_request(payload), before=3)
    assert removed == 1 and kept.payload["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert kept.payload["messages"][3]["content"][0] == thinking
    assert kept.payload["messages"][1]["content"] == [{"type": "text", "text": "hello"}]
    assert strip_thinking(_request(payload), before=0)[1] == 0
