"""First-party upstream: the Anthropic API (``ANTHROPIC_BASE_URL``, default api.anthropic.com).

The body goes upstream byte-for-byte as the client sent it unless request preparation
(:func:`~gateway.providers.preparation.prepare`, shared with the cloud providers) changed something:
``GATEWAY_MODEL_MAP``, a ``GATEWAY_BETA_POLICY`` row for ``anthropic`` (the default keeps every beta)
or ``GATEWAY_FOLD_SYSTEM_MESSAGES``. When none of them can apply, preparation is skipped (no copy,
no parse). The client's credential is replaced by
the gateway's (``x-api-key`` for ``ANTHROPIC_API_KEY``, ``Authorization: Bearer`` for
``ANTHROPIC_AUTH_TOKEN``); a fresh ``x-client-request-id`` is added (first party only: third-party
hosts may reject unknown headers). Responses, errors included, are relayed verbatim: clients'
recovery logic matches the upstream wording.
"""

from __future__ import annotations

from gateway.config import ProviderName, Settings
from gateway.errors import GatewayError
from gateway.providers.base import ClientRequest, Provider, UpstreamResponse
from gateway.providers.betas import BetaPolicy
from gateway.providers.preparation import first_party_headers, prepare, resolver_for
from gateway.transport import HttpUpstreamResponse, Upstream, UpstreamPool


class AnthropicProvider(Provider):
    name = "anthropic"

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._pool = UpstreamPool()
        self._resolver = resolver_for(settings)
        self._policy = BetaPolicy.from_settings(settings.beta_policy)
        # the default first-party policy keeps every beta and strips nothing
        self._policy_applies = self._policy.accepted.get(ProviderName.ANTHROPIC) is not None
        if settings.anthropic_api_key is not None:
            self._auth: tuple[str, str] | None = ("x-api-key", settings.anthropic_api_key.get_secret_value())
            self._credential_source = "ANTHROPIC_API_KEY"
        elif settings.anthropic_auth_token is not None:
            token = settings.anthropic_auth_token.get_secret_value()
            self._auth = ("Authorization", f"Bearer {token}")
            self._credential_source = "ANTHROPIC_AUTH_TOKEN"
        else:
            self._auth = None
            self._credential_source = "none"

    async def start(self) -> None:
        self._pool.open(self._settings.anthropic_base_url, self._settings)

    async def close(self) -> None:
        await self._pool.close()

    def not_ready_reason(self) -> str | None:
        if self._auth is None:
            return "no upstream credential: set ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN"
        return None

    def describe(self) -> dict[str, str]:
        return {
            "provider": self.name,
            "base_url": self._settings.anthropic_base_url,
            "credential_source": self._credential_source,
            "proxy": self._pool.proxy_label,
        }

    async def messages(self, request: ClientRequest) -> UpstreamResponse:
        return await self._post("/v1/messages", request)

    async def count_tokens(self, request: ClientRequest) -> UpstreamResponse:
        return await self._post("/v1/messages/count_tokens", request)

    async def list_models(self, headers: list[tuple[str, str]], query: str) -> UpstreamResponse:
        path = "/v1/models" + (f"?{query}" if query else "")
        response = await self._connection().request("GET", path, headers=self._with_auth(headers))
        return HttpUpstreamResponse(response)

    async def _post(self, path: str, request: ClientRequest) -> UpstreamResponse:
        auth = self._with_auth([])
        dropped: tuple[str, ...] = ()
        if not self._needs_preparation(request):
            headers, body = [*request.headers, *auth], request.body
        else:
            prepared = prepare(
                request,
                ProviderName.ANTHROPIC,
                self._resolver,
                self._policy,
                fold_targets=self._settings.fold_system_messages,
            )
            headers = first_party_headers(request.headers, prepared, auth)
            body, dropped = prepared.body_bytes(request), tuple(prepared.dropped_betas)
        headers.append(("x-client-request-id", request.request_id))
        response = await self._connection().request("POST", path, headers=headers, body=body)
        result = HttpUpstreamResponse(response)
        result.dropped_betas = dropped
        return result

    def _needs_preparation(self, request: ClientRequest) -> bool:
        """Whether :func:`prepare` could change anything: otherwise it would only copy the payload."""
        return (
            self._policy_applies
            or bool(self._settings.fold_system_messages)
            or request.model in self._resolver.overrides
        )

    def _with_auth(self, headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
        if self._auth is None:
            raise GatewayError(
                503,
                "the gateway has no upstream credential configured",
                error_type="api_error",
                should_retry=False,
            )
        return [*headers, self._auth]

    def _connection(self) -> Upstream:
        return self._pool.require()
