"""Microsoft Foundry credentials: an API key, or Microsoft Entra ID tokens from azure-identity.

* ``ANTHROPIC_FOUNDRY_API_KEY`` set: sent as both ``x-api-key`` and ``api-key`` (the SDK does the
  same: the endpoint reads ``x-api-key``, ``api-key`` is kept for older deployments).
* Otherwise: ``Authorization: Bearer <Entra ID token>`` for ``GATEWAY_FOUNDRY_ENTRA_SCOPE``
  (default ``https://ai.azure.com/.default``). The token source is any blocking callable returning
  ``(token, expires_on)``; by default azure-identity's ``DefaultAzureCredential`` (environment
  service principal, workload identity, managed identity, Azure CLI...), which needs the optional
  ``azure-identity`` package (``pip install 'switchyard[foundry]'``), imported on first use only.
  Tokens are cached until shortly before expiry and fetched off the event loop
  (:class:`~gateway.providers.token_cache.TokenCache`).
* A token the source cannot produce is 401 ``authentication_error`` with ``x-should-retry:
  false`` (azure-identity reports every failure, network ones included, as
  ``ClientAuthenticationError``); an ``OSError`` from a custom source is 502.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Awaitable
from typing import Any, Final, TypeVar

from gateway.errors import GatewayError
from gateway.providers.token_cache import TokenCache, TokenFetch

log = logging.getLogger("switchyard.foundry_auth")

AZURE_IDENTITY_HINT: Final = "install the optional azure-identity package: pip install 'switchyard[foundry]'"

T = TypeVar("T")


def credential_token_source(credential: Any, scope: str) -> TokenFetch:
    """Adapt an azure-identity ``TokenCredential`` (anything with ``get_token(scope)``)."""

    def fetch() -> tuple[str, float]:
        access = credential.get_token(scope)
        return str(access.token), float(access.expires_on)

    return fetch


def default_token_source(scope: str) -> TokenFetch:
    """``DefaultAzureCredential`` for ``scope``, created on the first fetch and then reused."""
    state: dict[str, TokenFetch] = {}

    def fetch() -> tuple[str, float]:
        source = state.get("source")
        if source is None:
            from azure.identity import DefaultAzureCredential

            source = state["source"] = credential_token_source(DefaultAzureCredential(), scope)
        return source()

    return fetch


def azure_identity_available() -> bool:
    return importlib.util.find_spec("azure.identity") is not None


class EntraTokens:
    """Entra ID bearer tokens for the Foundry resource, with errors mapped for the client."""

    def __init__(self, cache: TokenCache) -> None:
        self.cache = cache

    async def bearer(self) -> str:
        return await _mapped(self.cache.token())

    async def refresh(self) -> bool:
        return await _mapped(self.cache.refresh())


async def _mapped(call: Awaitable[T]) -> T:
    try:
        return await call
    except OSError as exc:
        log.warning("Entra ID token source unreachable: %s", exc)
        raise GatewayError(502, "The gateway could not reach its credential provider.") from None
    except Exception as exc:  # azure-identity: ClientAuthenticationError; custom sources: anything
        log.warning("Entra ID token unavailable: %s: %s", type(exc).__name__, exc)
        raise GatewayError(
            401,
            "The gateway could not obtain an Entra ID token for its upstream.",
            error_type="authentication_error",
            should_retry=False,
        ) from None
