"""AWS Bedrock upstream: the native InvokeModel / InvokeModelWithResponseStream / CountTokens APIs.

Native InvokeModel (not Converse) keeps the Anthropic body intact, so ``cache_control`` (with its
``ttl``), thinking, tools and every other Messages field reach the model as the client sent them.
Per request: :func:`~gateway.providers.preparation.prepare` maps the model name and applies the
Bedrock rows of the shaping table (:mod:`.shaping`: which betas go in the header, which in the
body, which are dropped with their body fields); :mod:`.bedrock_request` reshapes the body and path; :mod:`.bedrock_auth`
signs (SigV4) or adds the Bedrock API key; non-200 answers become Anthropic errors
(:mod:`.bedrock_errors`); streams are re-framed from the AWS event stream to SSE
(:mod:`gateway.streaming.eventstream`) with gateway-made pings in silent gaps.

Base URL: ``ANTHROPIC_BEDROCK_BASE_URL``, else ``https://bedrock-runtime.{AWS_REGION}.amazonaws.com``.
Responses carry the upstream's ``x-amzn-RequestId`` as ``request-id`` and its
``X-Amzn-Bedrock-*`` headers (token counts, latency).

``count_tokens`` uses Bedrock's CountTokens API, which takes foundation-model ids only; for an
application inference profile (or a provisioned model), or when CountTokens fails, the answer is
``501 not_supported`` with ``x-should-retry: false`` so clients fall back to estimating.
"""

from __future__ import annotations

import functools
import logging
from typing import Final

import aiohttp
import orjson

from gateway.config import ProviderName, Settings
from gateway.errors import ClientInputError, GatewayError, UpstreamUnavailable, error_body
from gateway.providers.base import BufferedResponse, ClientRequest, Provider, UpstreamResponse
from gateway.providers.bedrock_auth import BearerAuth, BedrockAuth, SigV4ChainAuth
from gateway.providers.bedrock_discovery import bedrock_fetcher
from gateway.providers.bedrock_errors import http_error, stream_error
from gateway.providers.bedrock_request import (
    count_tokens_body,
    foundation_model_id,
    invoke_body_bytes,
    model_path,
    upstream_headers,
)
from gateway.providers.betas import BetaPolicy
from gateway.providers.model_discovery import ModelCatalogue
from gateway.providers.model_listing import describe_model_map, models_page
from gateway.providers.preparation import PreparedRequest, prepare, resolver_for
from gateway.streaming.eventstream import EventStreamResponse, EventStreamToSSE
from gateway.transport import Upstream, UpstreamPool, read_error_body

log = logging.getLogger("switchyard.bedrock")

EVENT_STREAM: Final = "application/vnd.amazon.eventstream"
SSE_CONTENT_TYPE: Final = "text/event-stream; charset=utf-8"
JSON: Final = "application/json"


def _json_response(status: int, body: bytes, *extra: tuple[str, str]) -> BufferedResponse:
    return BufferedResponse(status, body, [("content-type", JSON), *extra])


def not_supported(message: str) -> BufferedResponse:
    return _json_response(501, error_body("not_supported", message), ("x-should-retry", "false"))


def _relayed_headers(response: aiohttp.ClientResponse, content_type: str) -> list[tuple[str, str]]:
    headers = [("content-type", content_type)]
    request_id = response.headers.get("x-amzn-RequestId")
    if request_id:
        headers.append(("request-id", request_id))
    headers.extend(
        (name, value)
        for name, value in response.headers.items()
        if name.lower().startswith("x-amzn-bedrock-")
    )
    return headers


class BedrockProvider(Provider):
    name = "bedrock"

    def __init__(self, settings: Settings) -> None:
        if settings.provider is not ProviderName.BEDROCK or settings.aws_region is None:
            raise ValueError("BedrockProvider needs settings with provider bedrock and AWS_REGION set")
        self._settings = settings
        self._region = settings.aws_region
        self._base_url = (
            settings.bedrock_base_url or f"https://bedrock-runtime.{self._region}.amazonaws.com"
        ).rstrip("/")
        self._policy = BetaPolicy.from_settings(settings.beta_policy)
        token = settings.aws_bearer_token_bedrock
        self._auth: BedrockAuth = (
            BearerAuth(token.get_secret_value())
            if token is not None
            else SigV4ChainAuth(self._region, settings.aws_profile, settings)
        )
        self.catalogue: ModelCatalogue | None = (
            ModelCatalogue(
                bedrock_fetcher(settings, self._auth),
                source="Bedrock control plane",
                interval_s=settings.model_discovery_interval_s,
                timeout_s=settings.model_discovery_timeout_s,
            )
            if settings.model_discovery
            else None
        )
        self._resolver = resolver_for(settings, self.catalogue)
        self._pool = UpstreamPool()

    @property
    def auth(self) -> BedrockAuth:
        """How requests are authenticated (its ``source`` names the credential source)."""
        return self._auth

    async def start(self) -> None:
        self._pool.open(self._base_url, self._settings)
        await self._auth.start()
        if self.catalogue is not None:
            await self.catalogue.start()

    async def close(self) -> None:
        if self.catalogue is not None:
            await self.catalogue.close()
        await self._pool.close()
        await self._auth.close()

    def not_ready_reason(self) -> str | None:
        return self._auth.not_ready_reason()

    async def readiness(self) -> str | None:
        await self._auth.recheck()
        return self._auth.not_ready_reason()

    async def refresh_credentials(self) -> bool:
        """Bedrock answered 401/403: re-run the AWS credential chain; ``True`` if it changed."""
        return await self._auth.reload()

    def describe(self) -> dict[str, str]:
        return {
            "provider": self.name,
            "region": self._region,
            "base_url": self._base_url,
            "credential_source": self._auth.source,
            "proxy": self._pool.proxy_label,
            "model_discovery": self.catalogue.describe() if self.catalogue is not None else "off",
            "model_map": describe_model_map(self._settings.model_map),
        }

    async def list_models(self, headers: list[tuple[str, str]], query: str) -> UpstreamResponse:
        return _json_response(200, orjson.dumps(models_page(self._resolver)))

    async def messages(self, request: ClientRequest) -> UpstreamResponse:
        prepared = self._prepare(request)
        stream = request.stream
        path = model_path(prepared.model, "invoke-with-response-stream" if stream else "invoke")
        body = invoke_body_bytes(prepared.payload, prepared.body_betas)
        headers = await self._signed(path, request, prepared, body)
        response = await self._connection().request("POST", path, headers=headers, body=body)
        upstream: UpstreamResponse
        if stream and response.status == 200 and response.content_type == EVENT_STREAM:
            upstream = self._event_stream(response, request)
        else:
            try:
                upstream = await self._buffered(response, request)
            finally:
                response.release()
        upstream.dropped_betas = tuple(prepared.dropped_betas)
        return upstream

    async def count_tokens(self, request: ClientRequest) -> UpstreamResponse:
        prepared = self._prepare(request)
        model_id = foundation_model_id(prepared.model)
        if model_id is None:
            return not_supported(
                f"token counting is not available for {request.model}: Bedrock's CountTokens "
                "takes foundation-model ids, not inference profile or provisioned-model ARNs"
            )
        path = model_path(model_id, "count-tokens")
        body = count_tokens_body(prepared.payload, prepared.body_betas)
        headers = await self._signed(path, request, prepared, body)
        try:
            response = await self._connection().request("POST", path, headers=headers, body=body)
        except GatewayError as exc:
            log.warning("CountTokens unreachable (request %s): %s", request.request_id, exc.message)
            return not_supported("token counting failed upstream; estimate locally")
        try:
            raw = await response.read()
        except aiohttp.ClientError:
            raw = b""
        finally:
            response.release()
        count = _input_tokens(raw) if response.status == 200 else None
        if count is None:
            log.warning(
                "CountTokens failed (request %s): status %s, %s",
                request.request_id,
                response.status,
                raw[:300].decode("utf-8", "replace"),
            )
            return not_supported("token counting failed upstream; estimate locally")
        out = _json_response(200, orjson.dumps({"input_tokens": count}))
        request_id = response.headers.get("x-amzn-RequestId")
        if request_id:
            out.headers.append(("request-id", request_id))
        out.dropped_betas = tuple(prepared.dropped_betas)
        return out

    def _prepare(self, request: ClientRequest) -> PreparedRequest:
        prepared = prepare(
            request,
            ProviderName.BEDROCK,
            self._resolver,
            self._policy,
            fold_targets=self._settings.fold_system_messages,
        )
        if not prepared.model:
            raise ClientInputError(400, "model: Field required", error_type="invalid_request_error")
        return prepared

    async def _signed(
        self, path: str, request: ClientRequest, prepared: PreparedRequest, body: bytes
    ) -> list[tuple[str, str]]:
        url = self._connection().base_url + path
        headers = upstream_headers(request.headers, prepared.betas)
        return await self._auth.authorize("POST", url, headers, body)

    def _event_stream(self, response: aiohttp.ClientResponse, request: ClientRequest) -> EventStreamResponse:
        mapper = functools.partial(stream_error, request_id=request.request_id)
        return EventStreamResponse(
            response.content.readany,
            response.release,
            EventStreamToSSE(mapper),
            headers=_relayed_headers(response, SSE_CONTENT_TYPE),
            ping_interval_s=self._settings.downstream_ping_s,
        )

    async def _buffered(self, response: aiohttp.ClientResponse, request: ClientRequest) -> BufferedResponse:
        if response.status == 200:
            try:
                body = await response.read()
            except (aiohttp.ClientError, OSError):
                raise UpstreamUnavailable("upstream connection lost while reading the response") from None
            return BufferedResponse(200, body, _relayed_headers(response, response.content_type or JSON))
        body = await read_error_body(response, "bedrock", request.request_id)
        return http_error(
            response.status,
            list(response.headers.items()),
            body,
            request_id=request.request_id,
            client_model=request.model,
        )

    def _connection(self) -> Upstream:
        return self._pool.require()


def _input_tokens(raw: bytes) -> int | None:
    try:
        decoded = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    count = decoded.get("inputTokens") if isinstance(decoded, dict) else None
    return count if isinstance(count, int) and not isinstance(count, bool) else None
