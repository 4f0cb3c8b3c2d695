"""The HTTP server: routes, inbound auth, limits, health/readiness, metrics exposition.

The request path only orchestrates: ``inbound`` builds the ``ClientRequest``, the configured
``Provider`` talks to the upstream, ``relay`` streams the answer back, ``metrics`` and the access
log record the outcome. Every error the gateway makes has the Anthropic error shape.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from aiohttp import web

from gateway import retry as retry_loop
from gateway.access_log import log_request
from gateway.accounting import SCOPE_KEY, RequestScope
from gateway.cache.pipeline import CachePipeline, build_store
from gateway.config import Settings
from gateway.drain import Drain
from gateway.errors import ClientInputError, GatewayError
from gateway.fleet.policy_gate import PolicyGate
from gateway.fleet.policy_setup import build_policy_gate
from gateway.fleet.telemetry import fleet_metrics
from gateway.inbound import Authenticator, client_request
from gateway.key_reload import KeyReloader
from gateway.keys import KeyRing
from gateway.metrics import GatewayMetrics, overhead_seconds
from gateway.outcome import Outcome
from gateway.pricing import load_price_table
from gateway.providers.base import Operation, PreparedRequest, Provider, UpstreamResponse
from gateway.providers.betas import BetaPolicy
from gateway.providers.models import answering_model
from gateway.redis_link import link_for
from gateway.relay import StreamRelay, StreamSettings
from gateway.relay_whole import relay_buffered
from gateway.request_ids import new_request_id
from gateway.request_preparation import RequestPreparation
from gateway.retry import ModelFallback, RetryPolicy, RetryResult, RetryStatus, Stop
from gateway.retry_budget import ClientRetries, final_headers, policy_for
from gateway.retry_memory import RequestKey, RetryMemory
from gateway.streaming.guard import HandBack
from gateway.transport import TeamSlots

if TYPE_CHECKING:
    from gateway.upstreams import UpstreamSet

log = logging.getLogger("switchyard.server")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Send = Callable[[PreparedRequest], Awaitable[UpstreamResponse]]


class Gateway:
    """The route handlers, bound to one settings snapshot, provider and metrics registry."""

    def __init__(
        self,
        settings: Settings,
        provider: Provider,
        metrics: GatewayMetrics,
        *,
        request_id_factory: Callable[[], str] = new_request_id,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        upstream_providers: Mapping[str, Provider] | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.provider = provider
        self.metrics = metrics
        # one team's in-flight upstream requests are capped (429 beyond): it cannot hold the whole pool
        egress = settings.egress
        self.team_slots = TeamSlots(egress.team_max_inflight, egress.upstream_pool_size, metrics.registry)
        self.keys = KeyRing(settings.inbound_keys)
        self.auth = Authenticator(self.keys, settings.auth.allow_unauthenticated)
        self.key_reloader = KeyReloader.for_settings(settings.auth, self.keys, on_reload=self._keys_reloaded)
        self.new_request_id = request_id_factory
        self.prices = load_price_table(settings.observability.pricing_file)  # validated with the settings
        self.clock = clock
        self.drain = Drain()  # shutdown state: readiness, and the deadline open streams watch
        self.known_betas = BetaPolicy.from_settings(settings.models.beta_policy).known_betas()
        self.sleep = sleep
        self.retry_policy = RetryPolicy.from_settings(settings.resilience)
        self.retry_memory = RetryMemory(settings.resilience.client_retry_window_s, clock=clock)
        self.stream_settings = StreamSettings(
            idle_warning_s=settings.resilience.stream_idle_warning_s,
            idle_timeout_s=settings.resilience.stream_idle_timeout_s,
            ping_every_s=settings.resilience.downstream_ping_s,
            nonstreaming_fallback=settings.resilience.nonstreaming_fallback,
            write_stall_s=settings.listener.write_stall_timeout_s,
        )
        metrics.prime(provider.name, self.keys)
        self.team_slots.prime(self.keys.teams)
        # one Redis client and outage back-off for sessions, upstream state and fleet counters
        self.redis_link = link_for(settings.cache, metrics.session_store_errors.inc)
        store = build_store(settings.cache, self.redis_link, teams=lambda: len(self.keys.teams))
        self.cache = CachePipeline(
            settings.cache,
            provider.name,
            store,
            on_break=lambda reason: metrics.observe_cache_break(provider.name, reason),
        )
        self.preparation = RequestPreparation(self.cache, provider)
        # --- upstreams (issue 18): several upstreams; None (one upstream) costs nothing per request
        self.upstreams: UpstreamSet | None = None
        if upstream_providers is not None:
            from gateway.upstreams import build as build_upstreams

            self.upstreams = build_upstreams(self, settings, upstream_providers, clock=wall_clock)
            for upstream in self.upstreams.upstreams.values():
                metrics.prime(upstream.kind.value, self.keys)
        # fleet policy (gateway.fleet): on the request path only with GATEWAY_POLICY_FILE set
        fleet = fleet_metrics(metrics.registry, settings.telemetry)  # the Fleet dashboard's series
        self.policy_gate: PolicyGate = build_policy_gate(settings, fleet, self.redis_link)
        self.policy = self.policy_gate if settings.policy.policy_file is not None else None

    def _keys_reloaded(self, ring: KeyRing) -> None:
        """New keys in force (SIGHUP): series of teams that appeared start at zero."""
        self.metrics.prime(self.provider.name, ring)
        self.team_slots.prime(ring.teams)

    # -- API --------------------------------------------------------------------------------
    async def messages(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, Operation.MESSAGES, self.provider.messages)

    async def count_tokens(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, Operation.COUNT_TOKENS, self.provider.count_tokens)

    async def _handle(
        self,
        request: web.Request,
        operation: Operation,
        send: Send,
    ) -> web.StreamResponse:
        scope = request[SCOPE_KEY]  # opened by the accounting middleware, closed by ``_close``
        outcome = scope.outcome
        try:
            principal = scope.principal = self.auth.principal_for(request)
            scope.team = principal.team
            scope.client = await client_request(request, operation, self.settings.listener, scope.request_id)
            slots = principal.label  # a bounded set, like every label
            self.team_slots.acquire(slots, len(self.keys.teams))
            try:  # (a refusal by the policy gives the slot back too)
                if self.policy is not None:  # models, caps, rate limits: before anything goes upstream
                    scope.admission = await self.policy.admit(
                        principal, scope.client, scope.request_id, request.headers
                    )
                return await self._exchange(request, scope, send)
            finally:
                self.team_slots.release(slots)
        except GatewayError as exc:
            if outcome.status == 0:  # made by the gateway for this request (auth, body, preparation)
                outcome.status, outcome.error_type, outcome.failure = exc.status, exc.error_type, exc.message
            raise
        except Exception as exc:
            if outcome.status == 0:  # the middleware answers 500
                outcome.status, outcome.error_type = 500, "api_error"
                outcome.failure = f"internal error: {type(exc).__name__}"
            raise

    async def _exchange(self, request: web.Request, scope: RequestScope, send: Send) -> web.StreamResponse:
        client = scope.client
        assert client is not None
        retry_key = RequestKey(scope.team, client)  # the client's own bytes, before any reshaping
        retrying = ClientRetries.from_headers(client.headers, self.retry_memory.recall(retry_key))
        if self.upstreams is not None:  # several upstreams (issue 18): route, fail over, keep affinity
            return await self.upstreams.exchange(request, scope, retrying, retry_key)
        try:  # once, before the retry loop: cache step, then the provider's preparation
            prepared = await self.preparation.prepare(client, scope.team)
        except ClientInputError as refused:  # e.g. a model the upstream does not serve
            refused.headers.setdefault("x-client-request-id", client.request_id)
            refused.headers.setdefault("x-gateway-retries", "0")
            raise
        cache_context = prepared.cache
        outcome = scope.outcome
        metrics = self.metrics
        provider = self.provider.name
        self.count_dropped_betas(prepared.request, provider)
        metrics.inflight_requests.inc()
        try:
            outcome.upstream_started_at = self.clock()
            attempt = await self._attempt(send, prepared.request, outcome, retrying)
            return await self._respond(request, scope, attempt, send, provider, retrying, retry_key)
        finally:
            metrics.inflight_requests.dec()
            if cache_context is not None:
                outcome.cache_break_reason = self.cache.after(
                    cache_context, outcome.usage, outcome.status, provider, served_model=outcome.model_fallback
                )

    def count_dropped_betas(self, prepared: PreparedRequest, provider: str) -> None:
        for beta in prepared.dropped_betas:
            label = beta if beta in self.known_betas else "other"
            self.metrics.betas_dropped.labels(provider, label).inc()

    async def _respond(
        self,
        request: web.Request,
        scope: RequestScope,
        attempt: RetryResult[PreparedRequest],
        send: Send,
        provider: str,
        retrying: ClientRetries,
        retry_key: RequestKey,
        upstream_name: str | None = None,
        hand_back: HandBack | None = None,
    ) -> web.StreamResponse:
        """Answer the client from the retry loop's outcome: the error, or the upstream's answer
        relayed (a stream through ``StreamRelay``, with its non-streaming fallback on ``send``).
        Several upstreams: ``upstream_name`` answered (``x-gateway-upstream``); ``hand_back``: a
        stream failing before any byte was sent may raise ``HandedBack`` (to fail over)."""
        client = scope.client
        assert client is not None
        operation = client.operation
        outcome = scope.outcome
        metrics = self.metrics
        extra = {"x-client-request-id": client.request_id, "x-gateway-retries": str(attempt.retries)}
        if attempt.model_fallback is not None:
            extra["x-gateway-model-fallback"] = attempt.model_fallback
        if upstream_name is not None:
            extra["x-gateway-upstream"] = upstream_name
        advice = self._final_advice(attempt, retrying, retry_key, provider)
        if attempt.error is not None:
            exc = attempt.error
            outcome.status = exc.status
            outcome.error_type = exc.error_type
            outcome.failure = exc.message
            if not isinstance(exc, ClientInputError):
                scope.upstream_error = exc.error_type
            should_retry = advice.pop("x-should-retry", None)
            if should_retry is not None:
                exc.should_retry = should_retry == "true"
            for name, value in {**extra, **advice}.items():
                exc.headers.setdefault(name, value)
            raise exc
        upstream = attempt.response
        assert upstream is not None
        extra.update(advice)
        if scope.admission is not None:  # a capped caller: the usage-limit headers are ours
            upstream.headers = scope.admission.apply(upstream.headers, extra)
        outcome.upstream_request_id = upstream.request_id()
        try:
            if client.stream and upstream.status == 200:
                final_request = attempt.request

                async def fallback() -> UpstreamResponse:
                    metrics.fallbacks.labels(provider, "non_streaming").inc()
                    return await send(final_request.as_non_streaming())  # derived once, here

                relay = StreamRelay(
                    request,
                    client,
                    outcome,
                    self.stream_settings,
                    fallback=fallback,
                    on_idle=lambda action: metrics.stream_idle.labels(provider, action.value).inc(),
                    clock=self.clock,
                    provider=provider,
                    hand_back=hand_back,
                )
                metrics.inflight_streams.inc()
                try:
                    return await relay.run(upstream, extra)
                finally:
                    metrics.inflight_streams.dec()
                    if outcome.error_type is not None:  # an error event or a broken stream
                        scope.upstream_error = outcome.error_type
            observe = operation is Operation.MESSAGES
            try:
                return await relay_buffered(upstream, extra, outcome, observe_usage=observe)
            finally:  # an error relayed as the upstream sent it, or its answer cut off or too long
                scope.upstream_error = outcome.error_type
        finally:
            outcome.upstream_done_at = self.clock()
            upstream.close()

    def _final_advice(
        self, attempt: RetryResult[PreparedRequest], retrying: ClientRetries, key: RequestKey, provider: str
    ) -> dict[str, str]:
        """Remember how the request ended and, for a retryable error, what the client is told."""
        if attempt.stop is Stop.DONE:
            if attempt.response is not None and attempt.response.status < 400:
                self.retry_memory.succeeded(key)
            return {}
        self.retry_memory.failed(key, attempt.retries + 1, attempt.overloads)
        upstream_headers = [] if attempt.response is None else attempt.response.headers
        advice = final_headers(self.retry_policy, retrying, attempt, upstream_headers)
        if attempt.error is not None and attempt.error.should_retry is not None:  # the error's own word
            advice["x-should-retry"] = "true" if attempt.error.should_retry else "false"
        self.metrics.retry_final_errors.labels(provider, attempt.stop.value, advice["x-should-retry"]).inc()
        return advice

    async def _attempt(
        self,
        send: Send,
        prepared: PreparedRequest,
        outcome: Outcome,
        retrying: ClientRetries,
        provider: Provider | None = None,
        policy: RetryPolicy | None = None,
        on_retry: Callable[[RetryStatus], None] | None = None,
    ) -> RetryResult[PreparedRequest]:
        """Run the bounded retry loop; its status events are logged and counted here.

        ``provider`` (default: the configured one), ``policy`` and ``on_retry`` (each retried
        failure) are given by the several-upstreams path (:mod:`gateway.upstreams.failover`)."""
        target = provider or self.provider
        label = target.name
        policy = policy or policy_for(self.retry_policy, retrying)
        first = await retry_loop.first_attempt(send, prepared, policy, self.clock)
        if isinstance(first, RetryResult):  # answered at once: no retry loop to run
            outcome.retries, outcome.failure, outcome.model_fallback = 0, None, None
            outcome.upstream_model = first.request.upstream_model or None
            return first
        final: RetryResult[PreparedRequest] | None = None
        async for event in retry_loop.with_retry(
            send,
            prepared,
            policy,
            refresh_credentials=target.refresh_credentials,
            sleep=self.sleep,
            clock=self.clock,
            first=first,
        ):
            if isinstance(event, RetryStatus):
                # what the access log says if the client leaves meanwhile (the loop then ends here)
                outcome.retries, outcome.failure = event.attempt - 1, f"while retrying after {event.reason}"
                self.metrics.retries.labels(label, event.reason).inc()
                if on_retry is not None:
                    on_retry(event)
                log.info(
                    "retrying upstream request: attempt=%d reason=%s delay=%.2fs request_id=%s",
                    event.attempt,
                    event.reason,
                    event.delay_s,
                    prepared.request_id,
                )
            elif isinstance(event, ModelFallback):
                self.metrics.fallbacks.labels(label, "model").inc()
                log.warning(
                    "consecutive overloads: falling back from %s to %s (request_id=%s)",
                    event.from_model,
                    event.to_model,
                    prepared.request_id,
                )
            else:  # the final result; the generator ends right after it, so the loop runs out
                final = event  # (an abandoned generator would be closed by a task of its own)
        if final is None:  # pragma: no cover
            raise RuntimeError("with_retry ended without an outcome")
        outcome.retries, outcome.failure = final.retries, None
        outcome.model_fallback = final.model_fallback
        outcome.upstream_model = final.request.upstream_model or None
        return final

    def _close(self, scope: RequestScope) -> None:
        """The end of one API request's accounting scope: its one sample and one access-log line."""
        client, team, outcome, started = scope.request(), scope.team, scope.outcome, scope.started
        finished = self.clock()
        duration = finished - started
        provider = scope.provider or self.provider.name
        model, stream = client.model, client.stream
        ttft = None if outcome.first_content_at is None else outcome.first_content_at - started
        overhead = overhead_seconds(
            started, finished, outcome.upstream_started_at, outcome.upstream_done_at, outcome.relay_busy_s
        )
        cost = None
        served = outcome.model_fallback or model  # tokens and spend: the model that answered
        if client.operation is Operation.MESSAGES and scope.client is not None:
            cost = self.prices.cost(provider, served, outcome.usage, outcome.upstream_model)
        if scope.admission is not None and self.policy is not None:  # spend, tokens, stream slot
            self.policy.record(scope.admission, None if cost is None else cost.total, outcome.usage)
        self.metrics.observe_finished(
            provider,
            model,
            stream,
            outcome.status,
            duration,
            ttft_s=ttft,
            overhead_s=overhead,
            upstream_error=scope.upstream_error,
            served_model=answering_model(outcome.upstream_model, served),  # a model map's target
            team=team if scope.principal is None else scope.principal.label,
            usage=outcome.usage if cost is not None else None,
            cost=cost,
        )
        log_request(
            client=client,
            outcome=outcome,
            provider=provider,
            team=team,
            duration_s=duration,
            ttft_s=ttft,
            overhead_s=overhead,
            cost=cost,
            log_bodies=self.settings.observability.log_bodies,
        )
