"""The in-memory session store: latch merging, LRU bound, idle expiry, last-request records."""

from __future__ import annotations

from gateway.cache.breaks import PreviousRequest
from gateway.cache.latches import Latches
from gateway.cache.prefix import prefix_hashes
from gateway.cache.store import RECENT_BREAKS, MemorySessionStore
from gateway.emulator.clock import ManualClock

HASHES = prefix_hashes({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, [])


def record(at: float, cached: int | None = 100) -> PreviousRequest:
    return PreviousRequest(HASHES, at, cached)


async def test_latches_merge_betas_and_keep_the_first_decided_eligibilities() -> None:
    store = MemorySessionStore(10, 60)
    latches, previous = await store.begin("s", Latches(frozenset({"a"})))  # a side call: undecided
    assert latches == Latches(frozenset({"a"})) and previous is None
    latches, _ = await store.begin("s", Latches(frozenset({"b"}), ttl_1h=True, global_scope=False))
    assert latches == Latches(frozenset({"a", "b"}), ttl_1h=True, global_scope=False)
    latches, _ = await store.begin("s", Latches(frozenset(), ttl_1h=False, global_scope=True))
    assert latches == Latches(frozenset({"a", "b"}), ttl_1h=True, global_scope=False)  # never flipped


async def test_finish_records_the_last_request_and_breaks() -> None:
    store = MemorySessionStore(10, 60)
    await store.begin("s", Latches())
    store.finish("s", record(1.0), {"reason": "first_request"})
    _, previous = await store.begin("s", Latches())
    assert previous == record(1.0)
    store.finish("s", None, None)  # a side call without breakpoints leaves the record alone
    _, previous = await store.begin("s", Latches())
    assert previous == record(1.0)
    for i in range(RECENT_BREAKS + 5):
        store.finish("s", None, {"reason": "unknown", "i": i})
    view = store.view("s")
    assert view is not None
    assert len(view.recent_breaks) == RECENT_BREAKS and view.recent_breaks[-1]["i"] == RECENT_BREAKS + 4
    store.finish("unknown-session", record(2.0), None)  # nothing to attach it to: ignored
    assert store.view("unknown-session") is None


async def test_the_least_recently_used_session_is_evicted_at_the_bound() -> None:
    store = MemorySessionStore(2, 60)
    await store.begin("a", Latches(frozenset({"x"})))
    await store.begin("b", Latches(frozenset({"y"})))
    await store.begin("a", Latches())  # a is now the most recent
    await store.begin("c", Latches())
    assert len(store) == 2
    assert store.view("b") is None
    assert store.view("a") is not None and store.view("c") is not None
    latches, _ = await store.begin("b", Latches())
    assert latches == Latches()  # b starts over


async def test_idle_sessions_expire() -> None:
    clock = ManualClock(1000.0)
    store = MemorySessionStore(10, 60, clock=clock.time)
    await store.begin("s", Latches(frozenset({"x"}), ttl_1h=True))
    store.finish("s", record(1000.0), None)
    clock.advance(59)
    view = store.view("s")
    assert view is not None and view.latches.betas == {"x"}
    latches, previous = await store.begin("s", Latches())  # a request refreshes the session
    assert latches.betas == {"x"} and previous is not None
    clock.advance(61)
    assert store.view("s") is None
    latches, previous = await store.begin("s", Latches())
    assert latches == Latches() and previous is None
