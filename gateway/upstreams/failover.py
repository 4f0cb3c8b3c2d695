"""The request path over several upstreams: route, keep the session on its cache, fail over.

Failover is decided before anything reaches the client (a stream failing before its first content
event, still held back, is handed back by the relay): once bytes of the answer are sent, the
request stays where it is. Every candidate failed: ``529 overloaded_error`` with ``retry-after``.

Details: docs/internals/gateway-upstreams.md
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web

from gateway.accounting import RequestScope
from gateway.cache.pipeline import CacheContext
from gateway.errors import ClientInputError, GatewayError
from gateway.providers.base import ClientRequest, Operation, PreparedRequest
from gateway.retry import RetryResult, RetryStatus
from gateway.retry_budget import ClientRetries, policy_for
from gateway.retry_memory import RequestKey
from gateway.streaming.guard import HandBack, HandedBack, StreamFailure
from gateway.upstreams.affinity import Placement, PlacementMap
from gateway.upstreams.breaker import BreakerBoard
from gateway.upstreams.config import UpstreamsConfig
from gateway.upstreams.failures import UNSERVABLE, failover_reason, forget_stream, stream_failover_reason
from gateway.upstreams.health import ActiveProbe, PassiveHealth, readiness
from gateway.upstreams.metrics import UpstreamMetrics
from gateway.upstreams.provenance import History, for_upstream, history_of, next_origin
from gateway.upstreams.router import Plan, Router
from gateway.upstreams.signatures import conversation_slot
from gateway.upstreams.upstream import Upstream

if TYPE_CHECKING:
    from gateway.server import Gateway

log = logging.getLogger("switchyard.upstreams")


@dataclass(frozen=True, slots=True)
class _AnswerContext:
    """What relaying a chosen upstream's answer needs from ``exchange`` besides the attempt."""

    plan: Plan
    placement: Placement | None
    slot: str | None  # the session's placement key within its team (route and session id)
    origin: Placement | None  # where the conversation's thinking comes from (``.provenance``)
    origin_slot: str | None  # its key (first message and session id)
    history: History
    failures: dict[str, str]  # upstream -> why it was left (filled in as candidates fail)
    retrying: ClientRetries
    retry_key: RequestKey


class UpstreamSet:
    """Every configured upstream, the router, breakers, placements and their metrics."""

    def __init__(
        self,
        gateway: Gateway,
        config: UpstreamsConfig,
        upstreams: dict[str, Upstream],
        breakers: BreakerBoard,
        placements: PlacementMap,
        metrics: UpstreamMetrics,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.gateway = gateway
        self.config = config
        self.upstreams = upstreams
        self.breakers = breakers
        self.placements = placements
        self.metrics = metrics
        self.health = PassiveHealth(metrics, breakers)
        # a placement's time is refreshed at most this often (it only decides when a moved session
        # may return: an error of a tenth of return_after_s, at most a minute, is immaterial)
        return_after = config.affinity.return_after_s
        self._refresh_s = 60.0 if return_after is None else min(60.0, return_after / 10)
        self.router = Router(config, slack_s=self._refresh_s)
        self.probe: ActiveProbe | None = None
        self._probe_task: asyncio.Task[None] | None = None
        self.clock = clock  # wall-clock seconds (placements and breakers are shared by replicas)
        # internal upstream names reach clients only when the operator asks (GATEWAY_UPSTREAM_HEADER)
        self._upstream_header = gateway.settings.selection.upstream_header
        self._several_kinds = len({u.kind for u in upstreams.values()}) > 1  # thinking may cross

    def _unavailable(self, plan: Plan, client: ClientRequest) -> GatewayError:
        wait = max(1, math.ceil(self.breakers.retry_after(plan.route)))
        return GatewayError(
            529,
            "Overloaded: every upstream for this model is unavailable",
            error_type="overloaded_error",
            should_retry=True,
            headers={
                "retry-after": str(wait),
                "x-client-request-id": client.request_id,
                "x-gateway-retries": "0",
            },
        )

    async def exchange(
        self, request: web.Request, scope: RequestScope, retrying: ClientRetries, retry_key: RequestKey
    ) -> web.StreamResponse:
        gateway = self.gateway
        client = scope.client
        assert client is not None
        team, outcome, operation = scope.team, scope.outcome, client.operation
        session_id = client.session_id if operation is Operation.MESSAGES else None
        await self.breakers.sync()
        route = self.router.route_for(client.model)
        # a session is placed per route (a side request's model on another route, say haiku for
        # Claude Code's titles, does not move the conversation); with upstreams of several provider
        # kinds its thinking's origin is kept per conversation (across routes: after a model switch)
        slot = origin_slot = None
        placement = origin = None
        if session_id is not None:
            slot = f"{route.key}:{session_id}"
            origin_slot = conversation_slot(client.payload, session_id) if self._several_kinds else None
            found = await self.placements.get_many(team, (slot, origin_slot) if origin_slot else (slot,))
            placement, origin = found[0], found[-1] if origin_slot else None
        now = self.clock()
        plan = self.router.plan(client.model, session_id, placement, self.breakers.available, now)
        if not plan.candidates:
            raise self._unavailable(plan, client)
        assumed = self.upstreams[plan.home or plan.candidates[0]].kind
        history = history_of(client, origin, unknown=origin_slot is not None, assumed=assumed)
        base_policy = policy_for(gateway.retry_policy, retrying)
        served: Upstream | None = None
        attempt: RetryResult[PreparedRequest] | None = None
        context: CacheContext | None = None
        failures: dict[str, str] = dict.fromkeys(plan.skipped, "breaker_open")
        refused: ClientInputError | None = None
        unservable: tuple[Upstream, RetryResult[PreparedRequest], CacheContext | None] | None = None
        tried = 0
        answer_context = _AnswerContext(plan, placement, slot, origin, origin_slot, history, failures, retrying, retry_key)
        gateway.metrics.inflight_requests.inc()
        try:
            outcome.upstream_started_at = gateway.clock()
            for index, name in enumerate(plan.candidates):
                upstream = self.upstreams[name]
                if not await self.breakers.acquire(name):  # a half-open probe slot taken meanwhile
                    failures[name] = "breaker_open"
                    continue
                try:
                    prepared = await upstream.preparation.prepare(
                        for_upstream(client, upstream.kind, name, history), team
                    )
                except ClientInputError as exc:  # this upstream cannot serve it (e.g. the model)
                    self.breakers.release(name)
                    failures[name] = UNSERVABLE
                    refused = refused or exc
                    continue
                except BaseException:
                    self.breakers.release(name)
                    raise
                # the last one that can be tried now gets the whole retry budget and keeps its fallback
                last = not any(map(self.breakers.available, plan.candidates[index + 1 :]))
                policy = base_policy
                if not last:  # a few quick retries here, then the next candidate (no long waits)
                    policy = dataclasses.replace(
                        policy,
                        max_retries=min(policy.max_retries, self.config.failover.same_upstream_retries),
                        move_on_after_s=self.config.failover.same_upstream_max_wait_s,
                    )
                self.metrics.selected.labels(name, plan.reason if tried == 0 else "failover").inc()
                tried += 1
                retried: list[RetryStatus] = []
                gateway.count_dropped_betas(prepared.request, upstream.kind.value)
                started = gateway.clock()
                try:
                    attempt = await gateway._attempt(
                        upstream.send(operation),
                        prepared.request,
                        outcome,
                        retrying,
                        upstream.provider,
                        policy,
                        retried.append,
                    )
                except BaseException:  # the client left (cancelled), or a bug: no outcome to record
                    self.breakers.release(name)  # a half-open probe slot is not kept forever
                    raise
                self.metrics.latency.labels(name).observe(gateway.clock() - started)
                reason = failover_reason(attempt)
                for event in retried:
                    if event.reason != "credential_refresh":
                        self.metrics.failures.labels(name, event.reason).inc()
                        if reason not in (None, UNSERVABLE):  # a retry that then succeeded does not trip it
                            await self.breakers.failure(name)  # (a half-open probe: not reopened)
                if reason == UNSERVABLE:  # it answered (501): no failure of its health, try the next
                    self.breakers.release(name)
                    failures[name] = reason
                    if unservable is not None and unservable[1].response is not None:
                        unservable[1].response.close()
                    unservable = (upstream, attempt, prepared.cache)  # the answer if none can serve it
                    continue
                if reason is None and last:
                    await self.breakers.success(name)
                    self.health.observe(name, ok=True)
                    served, context = upstream, prepared.cache
                    break
                if reason is None:  # more to try: a stream failing before its first byte comes back
                    served, context = upstream, prepared.cache
                    try:
                        return await self._answer(request, scope, attempt, served, answer_context, last=False)
                    except HandedBack as back:
                        served = context = None
                        reason = stream_failover_reason(back.failure) or "status_5xx"
                        forget_stream(scope)
                        log.info("upstream %s stream failed before content: %s", name, back.failure.reason)
                self.metrics.failures.labels(name, reason).inc()
                await self.breakers.failure(name)
                self.health.observe(name, ok=False)
                failures[name] = reason
                if not last:
                    if attempt.response is not None:
                        attempt.response.close()
                    log.info(
                        "upstream %s failed (%s); trying the next one (request %s)",
                        name,
                        reason,
                        client.request_id,
                    )
                    continue
                if tried == 1 and "breaker_open" not in failures.values():
                    # the only upstream that could be tried (none skipped for its breaker): its own
                    # answer, as with one upstream
                    served, context = upstream, prepared.cache
                elif attempt.response is not None:
                    attempt.response.close()
            if served is None and unservable is not None and all(why == UNSERVABLE for why in failures.values()):
                served, attempt, context = unservable  # no candidate can serve it: its 501, not a 529
            if served is None or attempt is None:
                if refused is not None and tried == 0:
                    refused.headers.setdefault("x-client-request-id", client.request_id)
                    refused.headers.setdefault("x-gateway-retries", "0")
                    raise refused
                error = self._unavailable(plan, client)
                outcome.status, outcome.error_type, outcome.failure = 529, "overloaded_error", error.message
                scope.upstream_error = "overloaded_error"
                raise error
            return await self._answer(request, scope, attempt, served, answer_context)
        finally:
            gateway.metrics.inflight_requests.dec()
            if unservable is not None and unservable[1] is not attempt and unservable[1].response is not None:
                unservable[1].response.close()  # a 501 held back, another answer given
            if context is not None and served is not None:
                moved = plan.home is not None and served.name != plan.home
                outcome.cache_break_reason = reason_after = served.cache.after(
                    context, outcome.usage, outcome.status, served.kind.value, moved=moved,
                    served_model=outcome.model_fallback,
                )
                if reason_after == "upstream_changed":
                    self.metrics.move_writes.labels(served.name).inc(
                        outcome.usage.cache_creation_input_tokens
                    )

    async def _answer(
        self,
        request: web.Request,
        scope: RequestScope,
        attempt: RetryResult[PreparedRequest],
        served: Upstream,
        context: _AnswerContext,
        *,
        last: bool = True,
    ) -> web.StreamResponse:
        """Relay ``served``'s answer, the session placed on it. Unless ``last``, a stream that fails
        before its first byte is sent is handed back (``HandedBack``): ``served`` counts as a
        success (breaker, health) and the session is placed only once the stream commits."""
        client, gateway, name = scope.client, self.gateway, served.name
        assert client is not None and (attempt.response is not None or attempt.error is not None)
        scope.provider = served.kind.value
        scope.outcome.upstream = name
        committed = last

        async def commit() -> None:
            nonlocal committed
            if not committed:
                committed = True
                await self.breakers.success(name)
                self.health.observe(name, ok=True)
            await self._place(context, scope.team, served, attempt)

        hand_back = None
        answered = attempt.response is not None and attempt.response.status == 200
        whole = answered and not client.stream  # read whole before a byte is sent: may come back too
        if last or not answered:  # nothing to hand back: committed now
            await commit()
        elif client.stream:
            hand_back = HandBack(lambda failure: stream_failover_reason(failure) is not None, commit)
        try:
            try:
                response = await gateway._respond(
                    request,
                    scope,
                    attempt,
                    served.send(client.operation),
                    served.kind.value,
                    context.retrying,
                    context.retry_key,
                    name if self._upstream_header else None,
                    hand_back=hand_back,
                )
            except GatewayError as exc:  # a whole 200 answer cut, stalled, too long or not a Message
                if whole and not committed and exc.status in (502, 504):
                    raise HandedBack(StreamFailure(exc.message, exc.error_type, exc.status)) from None
                raise
            if whole and not committed:  # read and checked: it is the answer
                await commit()
            return response
        finally:
            if not committed:  # handed back, answered without relaying the stream, or the client left
                self.breakers.release(name)  # (a half-open probe slot is not kept)

    async def _place(
        self, context: _AnswerContext, team: str, served: Upstream, attempt: RetryResult[PreparedRequest]
    ) -> None:
        """Record where the session's cache now is and where its conversation's thinking comes
        from (a provider answering after another: every message it was sent came from elsewhere;
        that count never shrinks: a short request of the conversation does not vouch for the
        rest), and count a move."""
        slot, plan, placement, history = context.slot, context.plan, context.placement, context.history
        if slot is None:
            return
        ok = attempt.error is None and attempt.response is not None and attempt.response.status < 400
        if not ok:
            return
        if plan.home is not None and served.name != plan.home:
            reason = "return" if plan.reason == "return" else context.failures.get(plan.home, "breaker_open")
            self.metrics.moves.labels(plan.home, served.name, reason).inc()
            log.info("session moved from upstream %s to %s (%s)", plan.home, served.name, reason)
        now = self.clock()
        writes: list[tuple[str, Placement]] = []
        if placement is None or placement.upstream != served.name or now - placement.at >= self._refresh_s:
            writes.append((slot, Placement(served.name, now)))  # (unchanged and recent: not rewritten)
        if context.origin_slot is not None:
            origin = next_origin(history, served.kind, context.origin, now, self._refresh_s)
            if origin is not None:
                writes.append((context.origin_slot, origin))
        if writes:
            await self.placements.put_many(team, tuple(writes))

    async def readyz(self) -> web.Response:
        """Ready while one upstream can serve (credentials present, breaker not open)."""
        return await readiness(self.upstreams, self.breakers)

    def start_probe(self) -> None:
        """Start the active probe (``probe.interval_s`` > 0) on the running loop."""
        options = self.config.probe
        if options.interval_s <= 0 or self._probe_task is not None:
            return
        model = options.model or next(
            (p for r in self.config.routes for p in r.patterns if not any(c in p for c in "*?[")),
            "claude-haiku-4-5",
        )
        probe = ActiveProbe(
            {name: u.provider for name, u in self.upstreams.items()},
            self.breakers,
            self.health,
            model=model,
            interval_s=options.interval_s,
            timeout_s=options.timeout_s,
        )
        self.probe = probe
        self._probe_task = asyncio.get_running_loop().create_task(probe.run())

    async def close(self) -> None:
        """Stop the probe and close the shared state (the providers are the app's to close)."""
        if self._probe_task is not None:
            self._probe_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe_task
        await self.breakers.close()
        await self.placements.close()
