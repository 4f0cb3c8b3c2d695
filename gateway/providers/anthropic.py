"""First-party upstream: the Anthropic API (``ANTHROPIC_BASE_URL``, default api.anthropic.com).

The body goes upstream byte-for-byte as the client sent it unless request preparation
(:class:`~gateway.providers.preparation.Preparer`, shared with the cloud providers) changed
something: ``GATEWAY_MODEL_MAP``, a ``GATEWAY_BETA_POLICY`` row for ``anthropic`` (the default
keeps every beta) or ``GATEWAY_FOLD_SYSTEM_MESSAGES``; with none of them applying, preparation
copies nothing and the client's bytes are sent. The client's credential is replaced by the
gateway's (``x-api-key`` for ``ANTHROPIC_API_KEY``, ``Authorization: Bearer`` for
``ANTHROPIC_AUTH_TOKEN``); a fresh ``x-client-request-id`` is added (first party only: third-party
hosts may reject unknown headers). Answers are relayed verbatim, errors in Anthropic's envelope
too (an echoed credential redacted), other error bodies replaced (``first_party_errors``).
"""

from __future__ import annotations

import logging

import aiohttp

from gateway.config import Settings
from gateway.echoed_secrets import remember
from gateway.egress import host_port
from gateway.errors import GatewayError
from gateway.provider_names import ProviderName
from gateway.providers.base import PreparedRequest, Provider, UpstreamResponse
from gateway.providers.first_party_errors import first_party_error
from gateway.providers.preparation import (
    FIRST_PARTY_PATHS,
    Framed,
    Preparer,
    Shaped,
    first_party_headers,
)
from gateway.transport import HttpUpstreamResponse, Upstream, UpstreamPool

log = logging.getLogger("switchyard.providers.anthropic")


class AnthropicProvider(Provider):
    name = "anthropic"

    def __init__(self, settings: Settings) -> None:
        super().__init__(Preparer(settings, ProviderName.ANTHROPIC, self.frame))
        self._settings = settings
        self._pool = UpstreamPool()
        if settings.anthropic.api_key is not None:
            self._auth: tuple[str, str] | None = ("x-api-key", settings.anthropic.api_key.get_secret_value())
            self._credential_source = "ANTHROPIC_API_KEY"
        elif settings.anthropic.auth_token is not None:
            token = settings.anthropic.auth_token.get_secret_value()
            self._auth = ("Authorization", f"Bearer {token}")
            self._credential_source = "ANTHROPIC_AUTH_TOKEN"
        else:
            self._auth = None
            self._credential_source = "none"
        if self._auth is not None:
            remember(self._auth[1].removeprefix("Bearer "))  # redacted wherever an upstream echoes it

    async def start(self) -> None:
        self._pool.open(self._settings.anthropic.base_url, self._settings.egress)
        if self._auth is None:  # it starts (as Bedrock without credentials does), and says so
            log.warning(
                "ANTHROPIC_API_KEY: not set (nor ANTHROPIC_AUTH_TOKEN): API requests are answered "
                "503 and /readyz is not ready until the gateway restarts with one"
            )

    async def close(self) -> None:
        await self._pool.close()

    def not_ready_reason(self) -> str | None:
        if self._auth is None:
            return "no upstream credential: set ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN"
        return None

    def describe(self) -> dict[str, str]:
        return {
            "provider": self.name,
            "base_url": self._settings.anthropic.base_url,
            "credential_source": self._credential_source,
            "proxy": self._pool.proxy_label,
        }

    def frame(self, shaped: Shaped) -> Framed:
        headers = first_party_headers(shaped, ("x-client-request-id", shaped.client.request_id))
        return Framed(FIRST_PARTY_PATHS[shaped.client.operation], shaped.first_party_body(), headers)

    async def messages(self, request: PreparedRequest) -> UpstreamResponse:
        return await self._post(request)

    async def count_tokens(self, request: PreparedRequest) -> UpstreamResponse:
        return await self._post(request)

    async def list_models(self, headers: list[tuple[str, str]], query: str) -> UpstreamResponse:
        path = "/v1/models" + (f"?{query}" if query else "")  # the client's raw query, escapes kept
        upstream = self._connection()
        response = await upstream.request(
            "GET", path, headers=self._with_auth(list(headers)), encoded_path=True
        )
        return await self._answer(upstream, response, "models")

    async def _post(self, request: PreparedRequest) -> UpstreamResponse:
        headers = self._with_auth(list(request.headers))
        upstream = self._connection()
        response = await upstream.request("POST", request.path, headers=headers, body=request.body)
        return await self._answer(upstream, response, request.request_id)

    async def _answer(
        self, upstream: Upstream, response: aiohttp.ClientResponse, request_id: str
    ) -> UpstreamResponse:
        if response.status < 400:
            return HttpUpstreamResponse(response, upstream.body_limits)
        plain_via_proxy = upstream.proxy is not None and not upstream.base_url.startswith("https")
        via = host_port(upstream.proxy) if plain_via_proxy else None
        return await first_party_error(response, upstream.body_limits, request_id, via)

    def _with_auth(self, headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
        if self._auth is None:
            raise GatewayError(
                503,
                "the gateway has no upstream credential configured",
                error_type="api_error",
                should_retry=False,
            )
        headers.append(self._auth)
        return headers

    def _connection(self) -> Upstream:
        return self._pool.require()
