"""The in-memory session store: latch merging, per-team isolation and quotas, the global bound,
idle expiry, last-request records, values shared between sessions."""

from __future__ import annotations

import pytest

from emulators.clock import ManualClock
from gateway.cache.breaks import BreakRecord, PreviousRequest
from gateway.cache.latches import Latches
from gateway.cache.prefix import prefix_hashes
from gateway.cache.session_store import RECENT_BREAKS, MemorySessionStore, SharedValues

HASHES = prefix_hashes({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, [])
TEAM = "default"


def record(at: float, cached: int | None = 100) -> PreviousRequest:
    return PreviousRequest(HASHES, at, cached)


def broke(reason: str, at: float = 1.0) -> BreakRecord:
    return BreakRecord(at, reason, 0, None, None)


async def test_latches_merge_betas_and_keep_the_first_decided_eligibilities() -> None:
    store = MemorySessionStore(10, 60)
    latches, previous = await store.begin(TEAM, "s", Latches(frozenset({"a"})))  # a side call: undecided
    assert latches == Latches(frozenset({"a"})) and previous is None
    latches, _ = await store.begin(TEAM, "s", Latches(frozenset({"b"}), ttl_1h=True, global_scope=False))
    assert latches == Latches(frozenset({"a", "b"}), ttl_1h=True, global_scope=False)
    latches, _ = await store.begin(TEAM, "s", Latches(frozenset(), ttl_1h=False, global_scope=True))
    assert latches == Latches(frozenset({"a", "b"}), ttl_1h=True, global_scope=False)  # never flipped


async def test_finish_records_the_last_request_and_breaks() -> None:
    store = MemorySessionStore(10, 60)
    await store.begin(TEAM, "s", Latches())
    store.finish(TEAM, "s", record(1.0), broke("first_request"))
    _, previous = await store.begin(TEAM, "s", Latches())
    assert previous == record(1.0)
    store.finish(TEAM, "s", None, None)  # a side call without breakpoints leaves the record alone
    _, previous = await store.begin(TEAM, "s", Latches())
    assert previous == record(1.0)
    for i in range(RECENT_BREAKS + 5):
        store.finish(TEAM, "s", None, broke("unknown", at=float(i)))
    view = store.view(TEAM, "s")
    assert view is not None
    assert len(view.recent_breaks) == RECENT_BREAKS
    assert [b.at for b in view.recent_breaks] == [float(i) for i in range(5, RECENT_BREAKS + 5)]
    assert view.recent_breaks[-1].as_dict() == {
        "at": RECENT_BREAKS + 4.0,
        "reason": "unknown",
        "cache_read_input_tokens": 0,
        "expected": None,
        "upstream_reason": None,
    }
    store.finish(TEAM, "unknown-session", record(2.0), None)  # nothing to attach it to: ignored
    assert store.view(TEAM, "unknown-session") is None


async def test_the_least_recently_used_session_is_evicted_at_the_bound() -> None:
    store = MemorySessionStore(2, 60)
    await store.begin(TEAM, "a", Latches(frozenset({"x"})))
    await store.begin(TEAM, "b", Latches(frozenset({"y"})))
    await store.begin(TEAM, "a", Latches())  # a is now the most recent
    await store.begin(TEAM, "c", Latches())
    assert len(store) == 2
    assert store.view(TEAM, "b") is None
    assert store.view(TEAM, "a") is not None and store.view(TEAM, "c") is not None
    latches, _ = await store.begin(TEAM, "b", Latches())
    assert latches == Latches()  # b starts over


async def test_idle_sessions_expire() -> None:
    clock = ManualClock(1000.0)
    store = MemorySessionStore(10, 60, clock=clock.time)
    await store.begin(TEAM, "s", Latches(frozenset({"x"}), ttl_1h=True))
    store.finish(TEAM, "s", record(1000.0), None)
    clock.advance(59)
    view = store.view(TEAM, "s")
    assert view is not None and view.latches.betas == {"x"}
    latches, previous = await store.begin(TEAM, "s", Latches())  # a request refreshes the session
    assert latches.betas == {"x"} and previous is not None
    clock.advance(61)
    assert store.view(TEAM, "s") is None
    latches, previous = await store.begin(TEAM, "s", Latches())
    assert latches == Latches() and previous is None


async def test_a_new_session_drops_its_teams_idle_ones() -> None:
    """Idle sessions do not wait for the bound to go: the next new session of the team drops them."""
    clock = ManualClock(1000.0)
    store = MemorySessionStore(100, 60, clock=clock.time)
    for i in range(5):
        await store.begin(TEAM, f"old-{i}", Latches())
    clock.advance(30)
    await store.begin(TEAM, "recent", Latches())
    clock.advance(31)
    await store.begin(TEAM, "new", Latches())
    assert len(store) == 2 and store.team_sizes() == {TEAM: 2}


async def test_the_same_session_id_in_two_teams_is_two_sessions() -> None:
    store = MemorySessionStore(10, 60)
    await store.begin("team-a", "shared-id", Latches(frozenset({"a-beta"}), ttl_1h=True))
    store.finish("team-a", "shared-id", record(1.0), broke("first_request"))
    assert store.view("team-b", "shared-id") is None
    assert await store.describe("team-b", "shared-id") is None
    latches, previous = await store.begin("team-b", "shared-id", Latches(frozenset({"b-beta"})))
    assert latches == Latches(frozenset({"b-beta"})) and previous is None  # nothing of team-a's
    store.finish("team-b", "shared-id", None, broke("unknown"))
    view = store.view("team-a", "shared-id")
    assert view is not None
    assert view.latches == Latches(frozenset({"a-beta"}), ttl_1h=True)
    assert [b.reason for b in view.recent_breaks] == ["first_request"]


async def test_a_team_beyond_its_quota_evicts_its_own_sessions_only() -> None:
    store = MemorySessionStore(10, 3600, max_per_team=5)
    for i in range(5):
        await store.begin("victim", f"v{i}", Latches(frozenset({"x"})))
    for i in range(1000):
        await store.begin("flooder", f"f{i}", Latches())
    assert store.team_sizes() == {"victim": 5, "flooder": 5}
    assert all(store.view("victim", f"v{i}") is not None for i in range(5))
    assert [i for i in range(1000) if store.view("flooder", f"f{i}") is not None] == list(range(995, 1000))


async def test_the_default_quota_follows_the_number_of_teams() -> None:
    """The gateway's quota: the global bound shared equally by the teams with keys, read at each
    new session (a key reload adding a team shrinks every share)."""
    teams = [2]
    store = MemorySessionStore(8, 3600, max_per_team=lambda: 8 // teams[0])
    for i in range(10):
        await store.begin("a", f"a{i}", Latches())
    assert store.team_sizes() == {"a": 4}
    teams[0] = 4
    await store.begin("a", "a-new", Latches())
    assert store.team_sizes() == {"a": 2}


@pytest.mark.parametrize("newcomer_sessions", [1, 3])
async def test_beyond_the_global_bound_the_largest_team_gives_way(newcomer_sessions: int) -> None:
    """Quotas that add up to more than the bound (an explicit GATEWAY_SESSION_MAX_PER_TEAM): the
    team holding the most sessions loses its oldest, so a small team keeps what it has."""
    store = MemorySessionStore(6, 3600, max_per_team=6)
    for i in range(6):
        await store.begin("big", f"b{i}", Latches())
    for i in range(newcomer_sessions):
        await store.begin("small", f"s{i}", Latches())
    assert len(store) == 6
    assert store.team_sizes() == {"big": 6 - newcomer_sessions, "small": newcomer_sessions}
    assert store.view("big", "b0") is None and store.view("big", "b5") is not None
    for i in range(10):  # the big team grows again: it evicts its own, now the largest on a tie
        await store.begin("big", f"again{i}", Latches())
    assert store.team_sizes()["small"] == newcomer_sessions


async def test_sessions_share_equal_latches_and_segments() -> None:
    store = MemorySessionStore(10, 60)
    for name in ("a", "b"):
        await store.begin(TEAM, name, Latches(frozenset({"x", "y"}), ttl_1h=False))
        hashes = prefix_hashes({"model": "m" * 3, "messages": [{"role": "user", "content": name}]}, ["x"])
        store.finish(TEAM, name, PreviousRequest(hashes, 1.0, 10), None)
    a, b = store.view(TEAM, "a"), store.view(TEAM, "b")
    assert a is not None and b is not None and a.previous is not None and b.previous is not None
    assert a.latches is b.latches
    assert a.previous.hashes.tools is b.previous.hashes.tools
    assert a.previous.hashes.model is b.previous.hashes.model
    assert a.previous.hashes.messages != b.previous.hashes.messages  # each session's own history


def test_the_shared_table_is_bounded() -> None:
    shared = SharedValues(limit=3)
    first = "".join(["va", "lue"])
    assert shared.get(first) is first
    assert shared.get("".join(["va", "lue"])) is first
    for i in range(10):
        shared.get(f"distinct-{i}")
    assert len(shared) <= 3


async def test_another_replicas_last_request_keeps_ours_among_the_other_conversations() -> None:
    """Adopting the fleet's last request (Redis: another replica served the session last) keeps
    this replica's own last request among the session's other conversations, bounded."""
    store = MemorySessionStore(10, 3600, clock=lambda: 10.0)
    await store.begin(TEAM, "s", Latches())
    store.finish(TEAM, "s", record(1.0), None)
    for at in (2.0, 3.0, 4.0, 5.0):
        store.adopt(TEAM, "s", Latches(), record(at))
    view = store.view(TEAM, "s")
    assert view is not None and view.previous == record(5.0)
    assert view.earlier == (record(4.0), record(3.0), record(2.0))  # the last three others
    store.adopt(TEAM, "s", Latches(), record(5.0))  # the same record again: nothing moves
    assert view.earlier == (record(4.0), record(3.0), record(2.0))
