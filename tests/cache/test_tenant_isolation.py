"""Tenant isolation through a real gateway in front of the first-party emulator: a team reads,
continues and evicts only its own sessions, and only a metrics key reads ``/metrics`` (every
team's spend)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.cache_stack import CacheStack, cache_stack, upstream_betas
from tests.support.cache_turns import claude_code_session

LATCHED = "context-1m-2025-08-07"
TEAM_A_KEY = "sk-team-a-0123456789"
TEAM_B_KEY = "sk-team-b-9876543210"
METRICS_FILE_KEY = "sk-scraper-from-the-file"
METRICS_ENV_KEY = "sk-scraper-from-the-env"


@pytest.fixture
async def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[CacheStack]:
    keys = tmp_path / "api-keys"
    keys.write_text(f"{TEAM_A_KEY} team-a\n{TEAM_B_KEY} team-b\n{METRICS_FILE_KEY} monitoring role=metrics\n")
    async with cache_stack(
        "anthropic",
        tmp_path,
        monkeypatch,
        GATEWAY_API_KEYS="",
        GATEWAY_API_KEYS_FILE=str(keys),
        GATEWAY_METRICS_API_KEYS=METRICS_ENV_KEY,
        GATEWAY_SESSION_MAX="6",  # two teams with keys: 3 sessions each
    ) as built:
        yield built


async def test_another_teams_session_is_absent(stack: CacheStack) -> None:
    for turn in claude_code_session("team-a-session"):
        assert (await stack.send(turn, key=TEAM_A_KEY)).status == 200
    status, own = await stack.session("team-a-session", key=TEAM_A_KEY)
    assert status == 200 and LATCHED in own["latches"]["betas"]
    other_status, other = await stack.session("team-a-session", key=TEAM_B_KEY)
    absent_status, absent = await stack.session("never-seen-anywhere", key=TEAM_B_KEY)
    assert other_status == absent_status == 404
    assert (
        other
        == absent
        == {
            "type": "error",
            "error": {"type": "not_found_error", "message": "no such session"},
        }
    )


async def test_the_same_session_id_in_another_team_starts_its_own_session(stack: CacheStack) -> None:
    turns = claude_code_session("colliding-id")
    assert (await stack.send(turns[0], key=TEAM_A_KEY)).status == 200
    # team B sends the same id without the latched beta: A's latch is not B's
    assert (await stack.send(turns[1].without_betas(LATCHED), key=TEAM_B_KEY)).status == 200
    assert LATCHED not in upstream_betas(stack.model_requests()[-1])
    status, b_view = await stack.session("colliding-id", key=TEAM_B_KEY)
    assert status == 200 and LATCHED not in b_view["latches"]["betas"]
    assert b_view["last_request"]["prefix"]["messages"] == len(turns[1].body["messages"])
    # A's session goes on as it was: its latch holds, its record is its own first request
    status, a_view = await stack.session("colliding-id", key=TEAM_A_KEY)
    assert status == 200 and LATCHED in a_view["latches"]["betas"]
    assert a_view["last_request"]["prefix"]["messages"] == len(turns[0].body["messages"])
    assert (await stack.send(turns[1].without_betas(LATCHED), key=TEAM_A_KEY)).status == 200
    assert LATCHED in upstream_betas(stack.model_requests()[-1])


async def test_a_team_opening_many_sessions_evicts_only_its_own(stack: CacheStack) -> None:
    first = claude_code_session("unused")[0]
    for name in ("a-1", "a-2"):
        assert (await stack.send(first.copy().with_session(name), key=TEAM_A_KEY)).status == 200
    for number in range(12):  # far beyond its share and the whole store's bound
        assert (await stack.send(first.copy().with_session(f"b-{number}"), key=TEAM_B_KEY)).status == 200
    for name in ("a-1", "a-2"):
        assert (await stack.session(name, key=TEAM_A_KEY))[0] == 200
    kept = [n for n in range(12) if (await stack.session(f"b-{n}", key=TEAM_B_KEY))[0] == 200]
    assert kept == [9, 10, 11]  # its quota: the bound shared by the two teams with keys


async def test_only_a_metrics_key_reads_metrics(stack: CacheStack) -> None:
    turn = claude_code_session("spend")[0]
    assert (await stack.send(turn, key=TEAM_A_KEY)).status == 200
    for key in (TEAM_A_KEY, TEAM_B_KEY):
        async with stack.http.get(f"{stack.base_url}/metrics", headers={"x-api-key": key}) as response:
            body = await response.json()
            assert response.status == 403 and body["error"]["type"] == "permission_error"
            assert "team-a" not in str(body)
    for key in (METRICS_FILE_KEY, METRICS_ENV_KEY):
        async with stack.http.get(
            f"{stack.base_url}/metrics", headers={"authorization": f"Bearer {key}"}
        ) as response:
            text = await response.text()
            assert response.status == 200
            assert (
                'gateway_cost_usd_total{model="claude-opus-4-8",provider="anthropic",team="team-a"}' in text
            )
        status, _ = await stack.session("spend", key=key)
        assert status == 403  # and nothing else


async def test_an_open_gateway_serves_metrics_to_anyone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with (
        cache_stack(
            "anthropic", tmp_path, monkeypatch, GATEWAY_API_KEYS="", GATEWAY_ALLOW_UNAUTHENTICATED="1"
        ) as stack,
        stack.http.get(f"{stack.base_url}/metrics") as response,
    ):
        assert response.status == 200 and "gateway_requests_total" in await response.text()
