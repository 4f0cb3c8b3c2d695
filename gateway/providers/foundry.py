"""Microsoft Foundry upstream: Claude on Azure, with the first-party wire format.

Foundry is the first-party surface: no shaping-table rows, the client's bytes go upstream
unchanged unless the model map, beta policy or system fold changed something.

Details: docs/internals/gateway-providers.md
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

from gateway.config import ConfigError, Settings
from gateway.echoed_secrets import remember
from gateway.errors import GatewayError
from gateway.provider_names import ProviderName
from gateway.providers.base import PreparedRequest, Provider, UpstreamResponse
from gateway.providers.credentials_health import CredentialHealth
from gateway.providers.foundry_auth import (
    AZURE_IDENTITY_HINT,
    EntraTokens,
    azure_identity_available,
    default_token_source,
    mapped_token_source,
)
from gateway.providers.foundry_errors import foundry_error_response
from gateway.providers.key_file import SIGHUP, KeyFile, key_file
from gateway.providers.preparation import (
    FIRST_PARTY_PATHS,
    Framed,
    Preparer,
    Shaped,
    first_party_headers,
)
from gateway.providers.token_cache import TokenCache, TokenFetch
from gateway.transport import HttpUpstreamResponse, UpstreamPool
from gateway.upstream_body import read_error_body


def foundry_base_url(settings: Settings) -> str | None:
    """``ANTHROPIC_FOUNDRY_BASE_URL``, else the resource's ``/anthropic`` root, else ``None``."""
    if settings.foundry.base_url:
        return settings.foundry.base_url.rstrip("/")
    if settings.foundry.resource:
        return f"https://{settings.foundry.resource}.services.ai.azure.com/anthropic"
    return None


class FoundryProvider(Provider):
    name = "foundry"

    def __init__(
        self,
        settings: Settings,
        *,
        token_source: TokenFetch | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``token_source``: the Entra ID token fetch to use instead of ``DefaultAzureCredential``."""
        super().__init__(Preparer(settings, ProviderName.FOUNDRY, self.frame))
        self._settings = settings
        self._base_url = foundry_base_url(settings)
        self._pool = UpstreamPool()
        self._static_auth: list[tuple[str, str]] = []
        self._entra: EntraTokens | None = None
        self._close_source: Callable[[], None] | None = None
        self._needs_azure_identity = False
        foundry = settings.foundry
        # the key read from GATEWAY_FOUNDRY_API_KEY_FILE at start-up, re-read when Foundry refuses it
        self._key_file: KeyFile | None = key_file(
            foundry.api_key_file, "GATEWAY_FOUNDRY_API_KEY_FILE", foundry.key
        )
        if foundry.key is not None:
            self._static_auth = self._key_headers(foundry.key.get_secret_value())
            self._credential_source = (
                "ANTHROPIC_FOUNDRY_API_KEY" if self._key_file is None else "GATEWAY_FOUNDRY_API_KEY_FILE"
            )
        else:
            if token_source is None:
                default = default_token_source(settings.foundry.entra_scope, settings)
                token_source, self._close_source = default, default.close
                self._needs_azure_identity = True
                self._credential_source = "Entra ID (DefaultAzureCredential)"
            else:
                self._credential_source = "Entra ID (token source)"
            health = CredentialHealth.for_egress(settings.egress)
            cache = TokenCache(mapped_token_source(token_source, settings), clock=clock, health=health)
            self._entra = EntraTokens(cache)

    async def start(self) -> None:
        if self._base_url is None:
            raise ConfigError(
                "ANTHROPIC_FOUNDRY_RESOURCE: required when the provider is foundry "
                "(or set ANTHROPIC_FOUNDRY_BASE_URL)"
            )
        if self._needs_azure_identity and not azure_identity_available():
            raise ConfigError(
                f"ANTHROPIC_FOUNDRY_API_KEY: not set, and Entra ID auth needs to {AZURE_IDENTITY_HINT}"
            )
        self._pool.open(self._base_url, self._settings.egress)

    async def close(self) -> None:
        await self._pool.close()
        if self._close_source is not None:
            self._close_source()

    def not_ready_reason(self) -> str | None:
        if self._pool.upstream is None:
            return "Foundry provider not started"
        health = self._entra.cache.health if self._entra is not None else None
        return health.not_ready_reason() if health is not None else None

    async def readiness(self) -> str | None:
        """Retry a failing Entra ID token fetch when due (see :mod:`.credentials_health`)."""
        health = self._entra.cache.health if self._entra is not None else None
        if self._entra is not None and health is not None and health.recheck_due():
            with contextlib.suppress(GatewayError):
                await self._entra.bearer()
        return self.not_ready_reason()

    def describe(self) -> dict[str, str]:
        return {
            "provider": self.name,
            "base_url": self._base_url or "",
            "credential_source": self._credential_source,
            "proxy": self._pool.proxy_label,
        }

    async def refresh_credentials(self) -> bool:
        """Foundry rejected the credential: fetch a new Entra token, or re-read the key file;
        ``True`` if the next attempt goes with a new one (a key from the environment cannot change)."""
        if self._key_file is not None:
            return self._reread(self._key_file.refresh())
        if self._entra is None:
            return False
        return await self._entra.refresh()

    def reload_key_file(self) -> bool | None:
        """``SIGHUP``: re-read GATEWAY_FOUNDRY_API_KEY_FILE; ``True`` if a new key is in use."""
        return None if self._key_file is None else self._reread(self._key_file.reload(SIGHUP))

    def _reread(self, changed: bool) -> bool:
        if changed and self._key_file is not None:
            self._static_auth = self._key_headers(self._key_file.key)
        return changed

    @staticmethod
    def _key_headers(key: str) -> list[tuple[str, str]]:
        remember(key)  # redacted wherever an upstream echoes it
        return [("x-api-key", key), ("api-key", key)]

    def frame(self, shaped: Shaped) -> Framed:
        return Framed(
            FIRST_PARTY_PATHS[shaped.client.operation], shaped.first_party_body(), first_party_headers(shaped)
        )

    async def messages(self, request: PreparedRequest) -> UpstreamResponse:
        return await self._post(request)

    async def count_tokens(self, request: PreparedRequest) -> UpstreamResponse:
        return await self._post(request)

    async def _post(self, request: PreparedRequest) -> UpstreamResponse:
        auth = self._static_auth
        if self._key_file is not None:
            self._key_file.sent()
        elif self._entra is not None:
            auth = [("authorization", f"Bearer {await self._entra.bearer()}")]
        upstream = self._pool.require()
        response = await upstream.request(
            "POST", request.path, headers=[*request.headers, *auth], body=request.body
        )
        if 200 <= response.status < 300:
            return HttpUpstreamResponse(response, upstream.body_limits)
        raw = await read_error_body(response, upstream.body_limits, "foundry", request.request_id)
        return foundry_error_response(
            response.status, raw, response.headers.items(), request.request_id, request.model
        )
