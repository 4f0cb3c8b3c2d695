"""AWS Bedrock upstream: the native InvokeModel / InvokeModelWithResponseStream / CountTokens APIs.

Native InvokeModel (not Converse) keeps the Anthropic body intact. Body and path are shaped once
per request (``frame``); only signing happens per attempt. ``count_tokens`` answers ``501
not_supported`` with ``x-should-retry: false`` when CountTokens cannot serve the model.

Details: docs/internals/gateway-providers.md
"""

from __future__ import annotations

import functools
import logging
from typing import Final

import aiohttp
import orjson

from gateway.config import Settings
from gateway.errors import ClientInputError, GatewayError, error_body
from gateway.headers import sendable
from gateway.provider_names import ProviderName
from gateway.providers.base import BufferedResponse, Operation, PreparedRequest, Provider, UpstreamResponse
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
from gateway.providers.key_file import key_file
from gateway.providers.model_discovery import ModelCatalogue
from gateway.providers.model_listing import describe_model_map
from gateway.providers.preparation import Framed, Preparer, Shaped
from gateway.streaming.eventstream import EventStreamResponse, EventStreamToSSE
from gateway.streaming.guard import UPSTREAM_BROKEN
from gateway.transport import Upstream, UpstreamPool
from gateway.upstream_body import read_bounded, read_error_body, unreadable

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
    if request_id and sendable("request-id", request_id):
        headers.append(("request-id", request_id))
    headers.extend(
        (name, value)
        for name, value in response.headers.items()
        if name.lower().startswith("x-amzn-bedrock-") and sendable(name, value)
    )
    return headers


class BedrockProvider(Provider):
    name = "bedrock"

    def __init__(self, settings: Settings) -> None:
        if settings.provider is not ProviderName.BEDROCK or settings.bedrock.region is None:
            raise ValueError("BedrockProvider needs settings with provider bedrock and AWS_REGION set")
        self._settings = settings
        self._region = settings.bedrock.region
        self._base_url = (
            settings.bedrock.base_url or f"https://bedrock-runtime.{self._region}.amazonaws.com"
        ).rstrip("/")
        token = settings.bedrock.api_key
        token_file = key_file(settings.bedrock.bearer_token_file, "GATEWAY_BEDROCK_BEARER_TOKEN_FILE", token)
        self._auth: BedrockAuth = (
            BearerAuth(token.get_secret_value(), token_file)
            if token is not None
            else SigV4ChainAuth(self._region, settings.bedrock.profile, settings)
        )
        self.catalogue: ModelCatalogue | None = (
            ModelCatalogue(
                bedrock_fetcher(settings, self._auth),
                source="Bedrock control plane",
                interval_s=settings.models.model_discovery_interval_s,
                timeout_s=settings.models.model_discovery_timeout_s,
            )
            if settings.models.model_discovery
            else None
        )
        super().__init__(Preparer(settings, ProviderName.BEDROCK, self.frame, self.catalogue))
        self._pool = UpstreamPool()

    @property
    def auth(self) -> BedrockAuth:
        """How requests are authenticated (its ``source`` names the credential source)."""
        return self._auth

    async def start(self) -> None:
        self._pool.open(self._base_url, self._settings.egress)
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
        """Bedrock answered 401/403: re-run the AWS credential chain, or re-read the API key's
        file; ``True`` if it changed."""
        return await self._auth.reload()

    def reload_key_file(self) -> bool | None:
        """``SIGHUP``: re-read GATEWAY_BEDROCK_BEARER_TOKEN_FILE; ``True`` if a new key is in use."""
        return self._auth.reload_key_file() if isinstance(self._auth, BearerAuth) else None

    def describe(self) -> dict[str, str]:
        return {
            "provider": self.name,
            "region": self._region,
            "base_url": self._base_url,
            "credential_source": self._auth.source,
            "proxy": self._pool.proxy_label,
            "model_discovery": self.catalogue.describe() if self.catalogue is not None else "off",
            "model_map": describe_model_map(self._settings.models.model_map),
        }

    def frame(self, shaped: Shaped) -> Framed:
        model = shaped.upstream_model
        if not model:
            raise ClientInputError(400, "model: Field required", error_type="invalid_request_error")
        headers = tuple(upstream_headers(shaped.client.headers, shaped.betas))
        if shaped.client.operation is Operation.MESSAGES:
            path = model_path(model, "invoke-with-response-stream" if shaped.client.stream else "invoke")
            return Framed(path, invoke_body_bytes(shaped.payload, shaped.body_betas), headers)
        model_id = foundation_model_id(model)
        if model_id is None:
            return Framed(
                "",
                b"",
                headers,
                unsupported=f"token counting is not available for {shaped.client.model}: Bedrock's "
                "CountTokens takes foundation-model ids, not inference profile or provisioned-model ARNs",
            )
        path = model_path(model_id, "count-tokens")
        return Framed(path, count_tokens_body(shaped.payload, shaped.body_betas), headers)

    async def messages(self, request: PreparedRequest) -> UpstreamResponse:
        headers = await self._signed(request)
        response = await self._connection().request("POST", request.path, headers=headers, body=request.body)
        if request.stream and response.status == 200 and response.content_type == EVENT_STREAM:
            return self._event_stream(response, request)
        try:
            return await self._buffered(response, request)
        finally:
            response.release()

    async def count_tokens(self, request: PreparedRequest) -> UpstreamResponse:
        if request.unsupported is not None:
            return not_supported(request.unsupported)
        headers = await self._signed(request)
        try:
            response = await self._connection().request(
                "POST", request.path, headers=headers, body=request.body
            )
        except GatewayError as exc:
            log.warning("CountTokens unreachable (request %s): %s", request.request_id, exc.message)
            return not_supported("token counting failed upstream; estimate locally")
        try:
            raw = await read_bounded(
                response, self._connection().body_limits.for_errors()
            )  # {"inputTokens": N}
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
        return out

    async def _signed(self, request: PreparedRequest) -> list[tuple[str, str]]:
        """The headers of one attempt: signed now (credentials may have been refreshed since the
        last attempt); the body bytes are the prepared ones."""
        url = self._connection().base_url + request.path
        return await self._auth.authorize("POST", url, list(request.headers), request.body)

    def _event_stream(
        self, response: aiohttp.ClientResponse, request: PreparedRequest
    ) -> EventStreamResponse:
        mapper = functools.partial(stream_error, request_id=request.request_id)
        return EventStreamResponse(
            response.content.readany,
            response.release,
            EventStreamToSSE(mapper),
            headers=_relayed_headers(response, SSE_CONTENT_TYPE),
            ping_interval_s=self._settings.resilience.downstream_ping_s,
        )

    async def _buffered(self, response: aiohttp.ClientResponse, request: PreparedRequest) -> BufferedResponse:
        if response.status == 200:
            try:
                body = await read_bounded(response, self._connection().body_limits)
            except UPSTREAM_BROKEN as exc:  # cut, too long or stalled: retried unless too long
                raise unreadable(exc) from None
            return BufferedResponse(200, body, _relayed_headers(response, response.content_type or JSON))
        body = await read_error_body(response, self._connection().body_limits, "bedrock", request.request_id)
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
