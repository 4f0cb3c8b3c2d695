"""Microsoft Foundry credentials: an API key, or Microsoft Entra ID tokens from azure-identity.

azure-identity is optional and imported on first use only; tokens are cached and fetched off the
event loop, through the gateway's egress settings. Failures are named by cause.

Details: docs/internals/gateway-providers.md
"""

from __future__ import annotations

import importlib.util
import logging
import re
from collections.abc import Awaitable
from typing import Any, Final, TypeVar

from gateway.config import Settings
from gateway.egress import classify_sync
from gateway.providers.credentials_health import CredentialFailure
from gateway.providers.token_cache import TokenCache, TokenFetch
from gateway.settings.upstream_egress import EgressSettings

log = logging.getLogger("switchyard.foundry_auth")

AZURE_IDENTITY_HINT: Final = "install the optional azure-identity package: pip install 'switchyard[foundry]'"

T = TypeVar("T")


def credential_token_source(credential: Any, scope: str) -> TokenFetch:
    """Adapt an azure-identity ``TokenCredential`` (anything with ``get_token(scope)``)."""

    def fetch() -> tuple[str, float]:
        access = credential.get_token(scope)
        return str(access.token), float(access.expires_on)

    return fetch


class DefaultTokenSource:
    """``DefaultAzureCredential`` for ``scope`` with the gateway's egress settings, created on the
    first fetch and then reused; ``close()`` releases its connections."""

    def __init__(self, scope: str, settings: Settings) -> None:
        self._scope = scope
        self._settings = settings
        self._credential: Any = None
        self._options: dict[str, Any] = {}
        self._attempts: list[str] = []  # fetches are serialised by the token cache's thread lock

    def __call__(self) -> tuple[str, float]:
        from azure.core.exceptions import ClientAuthenticationError
        from azure.identity import CredentialUnavailableError

        if self._credential is None:
            from azure.identity import DefaultAzureCredential

            from gateway.providers.requests_egress import azure_transport_options

            self._options = azure_transport_options(self._settings.egress)
            self._credential = DefaultAzureCredential(**self._options)
            self._credential.credentials = tuple(
                _NotingAttempts(inner, self._attempts) for inner in self._credential.credentials
            )
        self._attempts.clear()
        try:
            return credential_token_source(self._credential, self._scope)()
        except ClientAuthenticationError as exc:
            if self._attempts:
                raise
            # every credential in the chain said "unavailable": nothing is configured (the chain
            # reports that as the same ClientAuthenticationError as a refusal)
            raise CredentialUnavailableError(message="no credential in the chain") from exc

    def close(self) -> None:
        if self._credential is not None:
            self._credential.close()
            self._options["transport"].session.close()  # not owned by the transport


class _NotingAttempts:
    """A credential of ``DefaultAzureCredential``'s chain that notes when it tried to
    authenticate (failed other than "unavailable"); everything else is the credential's own."""

    def __init__(self, inner: Any, attempts: list[str]) -> None:
        self._inner = inner
        self._attempts = attempts

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.identity import CredentialUnavailableError

        try:
            return self._inner.get_token(*scopes, **kwargs)
        except CredentialUnavailableError:
            raise
        except Exception:
            self._attempts.append(type(self._inner).__name__)
            raise

    @property
    def _credential_name(self) -> str:  # how the chain names it in its error message
        return str(getattr(self._inner, "_credential_name", type(self._inner).__name__))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def default_token_source(scope: str, settings: Settings) -> DefaultTokenSource:
    return DefaultTokenSource(scope, settings)


PREFIX: Final = "the gateway could not get a Microsoft Entra ID token"
_AADSTS = re.compile(r"\bAADSTS\d+\b")


def describe_entra_failure(exc: BaseException, egress: EgressSettings) -> CredentialFailure:
    """What made a token fetch fail, for the client and the log (no secret, no tenant detail)."""
    failure = classify_sync(
        exc, target="Microsoft Entra ID", proxy=egress.https_proxy, ca_bundle=egress.ca_bundle
    )
    if failure is not None:
        return CredentialFailure.from_egress(PREFIX, failure)
    if type(exc).__name__ == "CredentialUnavailableError":
        return CredentialFailure(
            f"{PREFIX}: DefaultAzureCredential found no credential (environment service principal, "
            "workload identity, managed identity, Azure CLI)",
            status=503,
        )
    code = _AADSTS.search(str(exc))
    if code is not None:
        return CredentialFailure(f"{PREFIX}: Entra ID refused the credential: {code.group(0)}")
    if isinstance(exc, OSError):
        return CredentialFailure(
            f"{PREFIX}: its token source could not be reached", status=502, retryable=True
        )
    return CredentialFailure(f"{PREFIX}: {type(exc).__name__}")


def mapped_token_source(source: TokenFetch, settings: Settings) -> TokenFetch:
    """``source`` with its failures turned into :class:`CredentialFailure` (named by cause)."""

    def fetch() -> tuple[str, float]:
        try:
            return source()
        except Exception as exc:
            raise describe_entra_failure(exc, settings.egress) from None

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
    except CredentialFailure as failure:
        raise failure.as_gateway_error() from None
