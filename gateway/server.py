"""The HTTP server: routes, inbound auth, limits, health/readiness, metrics exposition.

The request path only orchestrates: ``inbound`` builds the ``ClientRequest``, the configured
``Provider`` talks to the upstream, ``relay`` streams the answer back, ``metrics`` and the access
log record the outcome. Every error the gateway makes has the Anthropic error shape.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

import orjson
from aiohttp import web

from gateway.access_log import log_request
from gateway.accounting import SCOPE_KEY, RequestScope, accounting_middleware
from gateway.cache.pipeline import CachePipeline, build_store
from gateway.config import Settings
from gateway.drain import DRAIN_KEY, Drain
from gateway.egress import scrub
from gateway.errors import ClientInputError, GatewayError, error_body
from gateway.fleet import signin
from gateway.fleet.policy_gate import PolicyGate
from gateway.fleet.policy_reload import PolicyReloader
from gateway.fleet.policy_setup import build_policy_gate, filtered_listing
from gateway.fleet.routes import FleetRoutes
from gateway.fleet.telemetry import fleet_metrics, install_telemetry
from gateway.headers import header_value
from gateway.inbound import Authenticator, client_request, forwardable_headers, raw_query
from gateway.key_reload import KeyReloader
from gateway.keys import KeyRing
from gateway.metrics import EXPOSITION_CONTENT_TYPE, GatewayMetrics, overhead_seconds
from gateway.pricing import load_price_table
from gateway.providers.base import Operation, PreparedRequest, Provider, UpstreamResponse
from gateway.providers.betas import BetaPolicy
from gateway.relay import Outcome, StreamRelay, StreamSettings, relay_buffered
from gateway.request_ids import new_request_id
from gateway.request_preparation import RequestPreparation
from gateway.retry import ModelFallback, RetryPolicy, RetryResult, RetryStatus, Stop, with_retry
from gateway.retry_budget import ClientRetries, final_headers, policy_for
from gateway.retry_memory import RequestKey, RetryMemory
from gateway.startup_summary import strip_userinfo
from gateway.transport import TeamSlots

if TYPE_CHECKING:
    from gateway.upstreams import UpstreamSet

log = logging.getLogger("switchyard.server")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

SETTINGS_KEY = web.AppKey("settings", Settings)
PROVIDER_KEY = web.AppKey("provider", Provider)
METRICS_KEY = web.AppKey("metrics", GatewayMetrics)
KEY_RELOADER_KEY = web.AppKey("key_reloader", KeyReloader)  # set when GATEWAY_API_KEYS_FILE is
POLICY_RELOADER_KEY = web.AppKey("policy_reloader", PolicyReloader)  # set when GATEWAY_POLICY_FILE is

UNAUTHENTICATED_PATHS = frozenset({"/healthz", "/readyz"})


def _json_error(status: int, error_type: str, message: str, **headers: str) -> web.Response:
    return web.Response(
        status=status,
        body=error_body(error_type, message),
        headers={"content-type": "application/json", **headers},
    )


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except GatewayError as exc:
        return web.Response(status=exc.status, body=exc.body(), headers=exc.response_headers())
    except web.HTTPNotFound:
        # the client's path and method are not echoed (a key pasted into a URL stays out of answers)
        return _json_error(404, "not_found_error", "no such endpoint")
    except web.HTTPMethodNotAllowed as exc:
        return _json_error(
            405,
            "invalid_request_error",
            "method not allowed on this endpoint",
            allow=", ".join(sorted(exc.allowed_methods)),
        )
    except web.HTTPRequestEntityTooLarge:
        return _json_error(413, "request_too_large", "Request exceeds the maximum allowed number of bytes.")
    except web.HTTPException as exc:
        return _json_error(exc.status, "invalid_request_error", exc.reason)
    except Exception as exc:
        # aiohttp would log the traceback with the exception's text (which may hold a proxy URL
        # with credentials) and answer text/plain: log it scrubbed, answer in the Anthropic shape
        trace = scrub("".join(traceback.format_exception(exc)))
        log.error("unhandled error on %s %s: %s", request.method, request.path, trace)
        return _json_error(500, "api_error", "internal gateway error")


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
        store = build_store(
            settings.cache, on_error=metrics.session_store_errors.inc, teams=lambda: len(self.keys.teams)
        )
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
        self.policy_gate: PolicyGate = build_policy_gate(settings, on_refusal=fleet.refused)
        self.policy = self.policy_gate if settings.policy.policy_file is not None else None

    def _keys_reloaded(self, ring: KeyRing) -> None:
        """New keys in force (SIGHUP): series of teams that appeared start at zero."""
        self.metrics.prime(self.provider.name, ring)
        self.team_slots.prime(ring.teams)

    # -- health and operations -------------------------------------------------------------
    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    @property
    def draining(self) -> bool:
        """Shutting down: readiness fails at once so load balancers stop sending new requests."""
        return self.drain.draining

    async def readyz(self, request: web.Request) -> web.Response:
        if self.upstreams is not None and not self.draining:  # ready while one upstream can serve
            return await self.upstreams.readyz()
        reason = "draining" if self.draining else await self.provider.readiness()
        if reason is not None:
            return web.json_response({"status": "not ready", "reason": reason}, status=503)
        return web.json_response({"status": "ready", "provider": self.provider.name})

    async def metrics_endpoint(self, request: web.Request) -> web.Response:
        self.auth.check_metrics(request)
        response = web.Response(body=self.metrics.exposition())
        response.headers["content-type"] = EXPOSITION_CONTENT_TYPE
        return response

    # -- API --------------------------------------------------------------------------------
    async def messages(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, Operation.MESSAGES, self.provider.messages)

    async def count_tokens(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, Operation.COUNT_TOKENS, self.provider.count_tokens)

    async def session(self, request: web.Request) -> web.Response:
        """``GET /v1/sessions/{id}``: a session's latches, last prefix hashes and recent breaks
        (the caller's team's session only: another team's is answered as absent)."""
        team = self.auth.team_for(request)
        session_id = request.match_info["session_id"]
        view = await self.cache.store.describe(team, session_id)
        if view is None:
            raise GatewayError(404, "no such session", error_type="not_found_error")  # nor another team's
        previous = view.previous
        return web.json_response(
            {
                "session_id": session_id,
                "latches": view.latches.as_dict(),
                "last_request": None
                if previous is None
                else {
                    "at": previous.at,
                    "cached_tokens": previous.cached,
                    "prefix": previous.hashes.summary(),
                },
                "recent_breaks": [record.as_dict() for record in view.recent_breaks],
            }
        )

    async def models(self, request: web.Request) -> web.StreamResponse:
        principal = self.auth.principal_for(request)
        headers = forwardable_headers(request)
        upstream = await self.provider.list_models(headers, raw_query(request))
        if self.policy is not None:  # only the models the caller may use
            upstream = await filtered_listing(upstream, self.policy.effective(principal).models)
        try:
            return await relay_buffered(upstream, {}, Outcome(), observe_usage=False)
        finally:
            upstream.close()

    async def _handle(
        self,
        request: web.Request,
        operation: Operation,
        send: Callable[[PreparedRequest], Awaitable[UpstreamResponse]],
    ) -> web.StreamResponse:
        scope = request[SCOPE_KEY]  # opened by the accounting middleware, closed by ``_close``
        outcome = scope.outcome
        try:
            principal = scope.principal = self.auth.principal_for(request)
            scope.team = principal.team
            scope.client = await client_request(request, operation, self.settings.listener, scope.request_id)
            slots = principal.label  # a bounded set, like every label
            self.team_slots.acquire(slots, len(self.keys.teams))
            if self.policy is not None:  # models, caps, rate limits: before anything goes upstream
                scope.admission = await self.policy.admit(principal, scope.client, scope.request_id)
            try:
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

    async def _exchange(
        self,
        request: web.Request,
        scope: RequestScope,
        send: Callable[[PreparedRequest], Awaitable[UpstreamResponse]],
    ) -> web.StreamResponse:
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
                    cache_context, outcome.usage, outcome.status, provider
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
        send: Callable[[PreparedRequest], Awaitable[UpstreamResponse]],
        provider: str,
        retrying: ClientRetries,
        retry_key: RequestKey,
        upstream_name: str | None = None,
    ) -> web.StreamResponse:
        """Answer the client from the retry loop's outcome: the error, or the upstream's answer
        relayed (a stream through ``StreamRelay``, with its non-streaming fallback on ``send``).
        ``upstream_name``: the named upstream that answered (several upstreams: ``x-gateway-upstream``)."""
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
        outcome.upstream_request_id = header_value(upstream.headers, "request-id")
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
                )
                metrics.inflight_streams.inc()
                try:
                    return await relay.run(upstream, extra)
                finally:
                    metrics.inflight_streams.dec()
                    if outcome.error_type is not None:  # an error event or a broken stream
                        scope.upstream_error = outcome.error_type
            answer = await relay_buffered(
                upstream, extra, outcome, observe_usage=operation is Operation.MESSAGES
            )
            if upstream.status >= 400:  # relayed as the upstream sent it
                scope.upstream_error = outcome.error_type
            return answer
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
        send: Callable[[PreparedRequest], Awaitable[UpstreamResponse]],
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
        final: RetryResult[PreparedRequest] | None = None
        async for event in with_retry(
            send,
            prepared,
            policy or policy_for(self.retry_policy, retrying),
            refresh_credentials=target.refresh_credentials,
            sleep=self.sleep,
            clock=self.clock,
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
        served = outcome.model_fallback or model  # tokens and spend go to the model that answered
        if client.operation is Operation.MESSAGES and scope.client is not None:
            cost = self.prices.cost(provider, served, outcome.usage)
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
            served_model=served,
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


def create_app(
    settings: Settings,
    provider: Provider | None = None,
    *,
    metrics: GatewayMetrics | None = None,
    request_id_factory: Callable[[], str] | None = None,
    clock: Callable[[], float] = time.monotonic,
    signin_clock: Callable[[], float] = time.time,
    wall_clock: Callable[[], float] = time.time,
) -> web.Application:
    """Build the aiohttp application. The provider is started and closed with the app.

    ``clock``: the monotonic seconds the gateway times requests and stream silences with (tests
    on a virtual-time event loop pass its ``loop.time``, the clock the watchdog's timers run on).
    ``signin_clock``: the wall clock of fleet sign-in (token and grant expiry); ``wall_clock``: the
    one of several upstreams' breakers and session placements.
    """
    upstream_providers: dict[str, Provider] | None = None
    if (
        settings.selection.upstreams_file is not None
    ):  # several upstreams (issue 18): the first is the default
        from gateway.upstreams import build_providers

        upstream_providers = build_providers(settings)
        provider = provider or next(iter(upstream_providers.values()))
    if provider is None:
        from gateway.providers.factory import build_provider

        provider = build_provider(settings)
    metrics = metrics or GatewayMetrics()
    gateway = Gateway(
        settings,
        provider,
        metrics,
        request_id_factory=request_id_factory or new_request_id,
        clock=clock,
        upstream_providers=upstream_providers,
        wall_clock=wall_clock,
    )

    listener = settings.listener
    accounting = accounting_middleware(
        gateway._close, gateway.new_request_id, gateway.clock, write_stall_s=listener.write_stall_timeout_s
    )
    app = web.Application(client_max_size=listener.max_body_bytes, middlewares=[accounting, error_middleware])
    app[SETTINGS_KEY] = settings
    app[PROVIDER_KEY] = provider
    app[METRICS_KEY] = metrics
    app[DRAIN_KEY] = gateway.drain
    if gateway.key_reloader is not None:
        reloader = gateway.key_reloader
        app[KEY_RELOADER_KEY] = reloader

        async def watch_keys(_: web.Application) -> AsyncIterator[None]:
            task = asyncio.create_task(reloader.run())
            yield
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

        app.cleanup_ctx.append(watch_keys)
    if isinstance(gateway.policy_gate.holder, PolicyReloader):
        policy_reloader = app[POLICY_RELOADER_KEY] = gateway.policy_gate.holder

        async def watch_policy(_: web.Application) -> AsyncIterator[None]:
            # the file, and the caps the admin API set on any replica (shared through Redis)
            sync_s = settings.policy.policy_reload_s or 5.0
            tasks = [policy_reloader.run(), gateway.policy_gate.run_cap_sync(sync_s)]
            running_tasks = [asyncio.create_task(task) for task in tasks]
            yield
            for task in running_tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

        app.cleanup_ctx.append(watch_policy)
    FleetRoutes(gateway.policy_gate, gateway.auth.principal_for, gateway.auth.admin_for).add_to(app)
    app.router.add_post("/v1/messages", gateway.messages)
    app.router.add_post("/v1/messages/count_tokens", gateway.count_tokens)
    app.router.add_get("/v1/models", gateway.models)
    app.router.add_get("/v1/sessions/{session_id}", gateway.session)
    app.router.add_get("/healthz", gateway.healthz)
    app.router.add_get("/readyz", gateway.readyz)
    app.router.add_get("/metrics", gateway.metrics_endpoint)
    fleet = fleet_metrics(metrics.registry, settings.telemetry)
    signin.register(app, settings, gateway.auth, signin_clock, fleet.signed_in)  # fleet sign-in (issue 17)
    install_telemetry(app, settings, gateway.auth, metrics.registry)  # OTLP intake (issue 17)

    upstreams = gateway.upstreams
    started = [provider] if upstreams is None else [u.provider for u in upstreams.upstreams.values()]

    async def start_provider(_: web.Application) -> None:
        for each in started:
            await each.start()
            facts = {key: strip_userinfo(value) or "" for key, value in each.describe().items()}
            log.info("provider ready: %s", orjson.dumps(facts).decode())  # no URL userinfo
        if upstreams is not None:
            upstreams.start_probe()

    async def close_provider(_: web.Application) -> None:
        for each in started:
            await each.close()
        if upstreams is not None:
            await upstreams.close()
        await gateway.cache.store.close()
        await gateway.policy_gate.counters.close()

    app.on_startup.append(start_provider)
    app.on_cleanup.append(close_provider)
    return app
