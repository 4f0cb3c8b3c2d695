"""The cache-aware step of the request path: latches and normalisation before the upstream,
break detection after it.

An unchanged prefix must stay byte-identical turn after turn, and the step must cost next to
nothing for a body no rule applies to (no per-message Python work; no hashing without a session).

Details: docs/internals/gateway-cache.md
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable

import orjson

from gateway.cache.breaks import BreakReason, BreakRecord, PreviousRequest, classify, conversation_record
from gateway.cache.history import scan_messages
from gateway.cache.latches import DEFAULT_LATCHED_BETAS, Latches, merged_betas, observe
from gateway.cache.normalise import CacheRules, normalise
from gateway.cache.prefix import PrefixHashes, prefix_hashes
from gateway.cache.session_store import MemorySessionStore, Quota, SessionStore, SessionView
from gateway.providers.base import ClientRequest
from gateway.providers.betas import request_betas
from gateway.redis_link import RedisLink
from gateway.settings.prompt_cache import CacheSettings
from gateway.streaming.usage import Usage
from gateway.values import value

log = logging.getLogger("switchyard.cache")


@value
class CacheContext:
    """What ``before`` learnt, for ``after``."""

    team: str  # the session's owner: sessions are kept per (team, session id)
    session_id: str | None
    hashes: PrefixHashes | None  # None without a session: nothing to compare them with
    previous: PreviousRequest | None
    earlier: tuple[PreviousRequest, ...]  # the session's other conversations' last requests
    latches: Latches
    notes: tuple[str, ...]
    at: float  # when ``before`` ran (wall-clock seconds of the pipeline's clock)


def build_store(cache: CacheSettings, link: RedisLink | None, teams: Callable[[], int]) -> SessionStore:
    """The configured store: in memory, or shared through ``link`` (the replica's Redis, when
    ``GATEWAY_SESSION_STORE`` names one). ``teams``: how many teams have keys now (each gets an
    equal share of ``GATEWAY_SESSION_MAX`` unless ``GATEWAY_SESSION_MAX_PER_TEAM`` sets the quota)."""
    quota: Quota | int
    if cache.session_max_per_team is not None:
        quota = cache.session_max_per_team
    else:
        total = cache.session_max
        quota = lambda: max(1, total // max(1, teams()))  # noqa: E731 - read at each new session
    local = MemorySessionStore(cache.session_max, cache.session_idle_s, max_per_team=quota)
    if link is not None:
        from gateway.cache.redis_store import RedisSessionStore

        return RedisSessionStore(link, local=local, idle_s=cache.session_idle_s)
    return local


class CachePipeline:
    def __init__(
        self,
        cache: CacheSettings,
        provider: str,
        store: SessionStore,
        *,
        on_break: Callable[[str], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._latchable = DEFAULT_LATCHED_BETAS | frozenset(cache.latched_betas)
        self._rules = CacheRules(
            provider=provider,
            normalise_billing_header=provider in cache.normalise_billing_header,
            auto_cache=cache.auto_cache,
        )
        self._on_break = on_break
        self.clock = clock  # wall-clock seconds; injectable so tests can move time

    @property
    def store(self) -> SessionStore:
        return self._store

    async def before(self, client: ClientRequest, team: str) -> tuple[ClientRequest, CacheContext]:
        """``team``: the caller's (its session is looked up among that team's only)."""
        betas = list(request_betas(client.headers))
        session_id = client.session_id
        now = self.clock()
        latches = Latches()
        previous: PreviousRequest | None = None
        # one look at the messages: which can hold a marker, and the history the session's last
        # request already sent (this replica's record of it says how long it was)
        view = self._store.view(team, session_id) if session_id is not None else None
        scan = scan_messages(client.payload, _settled(view))
        if session_id is not None:
            observed = observe(client.payload, betas, self._latchable, messages=scan.marked)
            latches, previous = await self._store.begin(team, session_id, observed)
        result = normalise(client.payload, self._rules, latches, marked=scan.marked)
        sent_betas = merged_betas(betas, latches.betas)
        updated = client
        if result.changed:
            updated = client.with_payload(result.payload)
        if sent_betas != betas:
            headers = [(k, v) for k, v in updated.headers if k.lower() != "anthropic-beta"]
            headers.append(("anthropic-beta", ",".join(sent_betas)))
            updated = updated.with_headers(headers)  # a reshaped body stays unserialised until sent
        hashes = None
        if session_id is not None:
            hashes = prefix_hashes(
                updated.payload,
                [b for b in sent_betas if b in self._latchable],
                previous=previous.hashes if previous is not None else None,
                scan=scan,
            )
        earlier = view.earlier if view is not None else ()
        notes = tuple(result.notes)
        return updated, CacheContext(team, session_id, hashes, previous, earlier, latches, notes, now)

    def normalise_only(self, client: ClientRequest) -> ClientRequest:
        """count_tokens: the same cache_control rules, without touching the session's latches."""
        scan = scan_messages(client.payload)
        result = normalise(client.payload, self._rules, Latches(), marked=scan.marked)
        return client.with_payload(result.payload) if result.changed else client

    def after(
        self,
        context: CacheContext,
        usage: Usage,
        status: int,
        provider: str,
        *,
        moved: bool = False,
        served_model: str | None = None,
    ) -> str | None:
        """Classify a cache break (``None`` when there was none) and record the request's cache use.

        ``moved``: the request went to another upstream than the session's last one (several
        upstreams): a break is then ``upstream_changed``, whatever else differs. ``served_model``:
        the model that answered when it was not the request's (a model fallback): its cache is the
        one read and written."""
        hashes, session_id = context.hashes, context.session_id
        if status != 200 or session_id is None or hashes is None:
            return None
        now = self.clock()
        if served_model is not None and served_model != hashes.model:
            hashes = dataclasses.replace(hashes, model=served_model)
        records = (context.previous, *context.earlier) if context.previous is not None else context.earlier
        previous, continues = conversation_record(records, hashes)  # None: a new conversation's first
        reason = classify(previous, hashes, usage, now)
        if moved and reason is not None and reason is not BreakReason.FIRST_REQUEST:
            reason = BreakReason.UPSTREAM_CHANGED
        record: BreakRecord | None = None
        if reason is not None:
            self._on_break(reason.value)
            record = BreakRecord(
                now,
                reason.value,
                usage.cache_read_input_tokens,
                previous.cached if previous else None,
                usage.cache_miss_reason,
            )
            if reason is not BreakReason.FIRST_REQUEST:
                log.info(
                    orjson.dumps(
                        {
                            "event": "cache_break",
                            "team": context.team,
                            "session_id": context.session_id,
                            "provider": provider,
                            "reason": reason.value,
                            "cache_read_input_tokens": usage.cache_read_input_tokens,
                            "expected_cache_read": record.expected,
                            "upstream_cache_miss_reason": usage.cache_miss_reason,
                        }
                    ).decode()
                )
        cached = usage.cache_read_input_tokens + usage.cache_creation_input_tokens
        request = PreviousRequest(hashes, context.at, cached) if hashes.ttls else None
        earlier = None
        if request is not None and records:  # the other conversations': all but this one's
            earlier = tuple(dict.fromkeys(r for r in records if not (continues and r == previous)))
        if request is not None or record is not None:
            self._store.finish(context.team, session_id, request, record, earlier)
        return reason.value if reason is not None else None


def _settled(view: SessionView | None) -> int | None:
    """How many leading messages this request shares with the session's last one if its history
    only grew (what the history check of that request covers: all but its last)."""
    if view is None or view.previous is None or not view.previous.hashes.history_check:
        return None
    return len(view.previous.hashes.messages) - 1
