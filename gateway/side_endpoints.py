"""The gateway's endpoints besides the model calls: liveness, readiness, the metrics exposition,
a session's cache view and the model listing (filtered by the fleet policy)."""

from __future__ import annotations

from aiohttp import web

from gateway.errors import GatewayError
from gateway.fleet.policy_setup import filtered_listing
from gateway.inbound import forwardable_headers, raw_query
from gateway.metrics import EXPOSITION_CONTENT_TYPE
from gateway.outcome import Outcome
from gateway.relay_whole import relay_buffered
from gateway.server import Gateway


class SideEndpoints:
    """Route handlers over one :class:`Gateway`'s state."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    @property
    def draining(self) -> bool:
        """Shutting down: readiness fails at once so load balancers stop sending new requests."""
        return self.gateway.drain.draining

    async def readyz(self, request: web.Request) -> web.Response:
        if self.gateway.upstreams is not None and not self.draining:  # ready while one upstream can serve
            return await self.gateway.upstreams.readyz()
        reason = "draining" if self.draining else await self.gateway.provider.readiness()
        if reason is not None:
            return web.json_response({"status": "not ready", "reason": reason}, status=503)
        return web.json_response({"status": "ready", "provider": self.gateway.provider.name})

    async def metrics_endpoint(self, request: web.Request) -> web.Response:
        self.gateway.auth.check_metrics(request)
        response = web.Response(body=self.gateway.metrics.exposition())
        response.headers["content-type"] = EXPOSITION_CONTENT_TYPE
        return response

    async def session(self, request: web.Request) -> web.Response:
        """``GET /v1/sessions/{id}``: a session's latches, last prefix hashes and recent breaks
        (the caller's team's session only: another team's is answered as absent)."""
        team = self.gateway.auth.team_for(request)
        session_id = request.match_info["session_id"]
        view = await self.gateway.cache.store.describe(team, session_id)
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
        principal = self.gateway.auth.principal_for(request)
        headers = forwardable_headers(request)
        several = self.gateway.upstreams
        if several is None:
            upstream = await self.gateway.provider.list_models(headers, raw_query(request))
        else:  # the first upstream that can answer (one down does not take the listing with it)
            from gateway.upstreams.upstream import list_models

            upstream = await list_models(
                several.upstreams.values(), several.breakers.available, headers, raw_query(request)
            )
        if self.gateway.policy is not None:  # only the models the caller may use
            upstream = await filtered_listing(upstream, self.gateway.policy.effective(principal).models)
        try:
            return await relay_buffered(upstream, {}, Outcome(), observe_usage=False)
        finally:
            upstream.close()
