"""Google credentials for Vertex AI: Application Default Credentials through google-auth.

google-auth is imported inside functions (a gateway without Vertex never loads it); its refresh
runs in the default executor, one at a time, through the gateway's egress settings.

Details: docs/internals/gateway-providers.md
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import math
import time
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from gateway.config import ConfigError, Settings
from gateway.egress import classify_sync, host_port
from gateway.providers.credentials_health import CredentialFailure, CredentialHealth
from gateway.providers.token_cache import TokenCache, TokenFetch
from gateway.transport import proxy_for

log = logging.getLogger("switchyard.vertex_auth")

CLOUD_PLATFORM_SCOPE: Final = "https://www.googleapis.com/auth/cloud-platform"

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class GoogleCredentials:
    """Loaded ADC: the project they name (if any), where they came from, and their token."""

    project_id: str | None
    source: str
    tokens: TokenCache
    http: Any = None  # the requests session of the token calls (closed with the provider)

    def close(self) -> None:
        if self.http is not None:
            self.http.close()

    async def bearer(self) -> str:
        """A valid access token, refreshed when due; failures become Anthropic-shaped errors."""
        return await _mapped(self.tokens.token())

    async def refresh(self) -> bool:
        """Fetch a new token now (Vertex rejected the cached one); ``True`` if it changed."""
        return await _mapped(self.tokens.refresh())


async def _mapped(call: Awaitable[T]) -> T:
    """Await a token operation, turning a failed fetch into the client's gateway error."""
    try:
        return await call
    except CredentialFailure as failure:
        raise failure.as_gateway_error() from None


PREFIX: Final = "the gateway could not get a Google access token"


def describe_google_failure(exc: BaseException, credentials: Any, settings: Settings) -> CredentialFailure:
    """What made google-auth's refresh fail, for the client and the log (no secret, no JWT)."""
    from google.auth import exceptions

    token_uri = getattr(credentials, "_token_uri", None)  # service accounts, authorized users
    where = f"Google's token endpoint at {host_port(token_uri)}" if token_uri else "Google's token endpoint"
    proxy = proxy_for(token_uri, settings.egress) if token_uri else settings.egress.https_proxy
    egress = classify_sync(exc, target=where, proxy=proxy, ca_bundle=settings.egress.ca_bundle)
    if egress is not None:
        return CredentialFailure.from_egress(PREFIX, egress)
    if isinstance(exc, exceptions.TransportError):
        return CredentialFailure(f"{PREFIX}: {where} could not be reached", status=502, retryable=True)
    if isinstance(exc, exceptions.RefreshError):
        error, description = _oauth_error(exc)
        account = getattr(credentials, "service_account_email", None)
        named = f" {account}" if isinstance(account, str) and account else ""
        if getattr(exc, "retryable", False):
            return CredentialFailure(
                f"{PREFIX}: {where} is unavailable; retry later", status=503, retryable=True
            )
        if "account not found" in description.lower():
            return CredentialFailure(f"{PREFIX}: unknown service account{named} ({error}: account not found)")
        if "signature" in description.lower():
            return CredentialFailure(
                f"{PREFIX}: the service account{named} does not accept this key (revoked or replaced); "
                f"{error}: key rejected"
            )
        if "timeframe" in description.lower() or "iat and exp" in description.lower():
            return CredentialFailure(
                f"{PREFIX}: {error}: the gateway's clock is off (JWT outside its time window)"
            )
        return CredentialFailure(f"{PREFIX}: {where} refused the credential: {error}")
    return CredentialFailure(f"{PREFIX}: {type(exc).__name__}")


def _oauth_error(exc: BaseException) -> tuple[str, str]:
    """``(error, error_description)`` of a token endpoint's refusal as google-auth reports it."""
    for arg in exc.args[1:]:
        if isinstance(arg, dict) and isinstance(arg.get("error"), str):
            return arg["error"], str(arg.get("error_description", ""))
    text = str(exc.args[0]) if exc.args else ""
    error, _, description = text.partition(":")
    return (error.strip() or "refused"), description.strip()


def _expiry_seconds(expiry: datetime.datetime | None) -> float:
    """google-auth's naive-UTC ``expiry`` as Unix seconds (``inf`` when the token never expires)."""
    if expiry is None:
        return math.inf
    if expiry.tzinfo is None:
        expiry = expiry.replace(tzinfo=datetime.UTC)
    return expiry.timestamp()


def _refresher(credentials: Any, settings: Settings, http: Any) -> TokenFetch:
    from google.auth.exceptions import GoogleAuthError
    from google.auth.transport.requests import Request

    request = Request(session=http)

    def fetch() -> tuple[str, float]:
        try:
            credentials.refresh(request)
        except (GoogleAuthError, OSError) as exc:
            failure = describe_google_failure(exc, credentials, settings)
            log.debug("Google token refresh failed: %s", type(exc).__name__)
            raise failure from None
        token = credentials.token
        if not isinstance(token, str) or not token:
            raise CredentialFailure(f"{PREFIX}: the refresh returned no access token")
        return token, _expiry_seconds(credentials.expiry)

    return fetch


def _load(settings: Settings) -> tuple[Any, str | None, str]:
    """Blocking: find the credentials (ADC may probe the metadata server)."""
    import google.auth
    from google.auth import exceptions

    path = settings.vertex.credentials_file
    try:
        if path is not None:
            # The operator's own file, loaded the way google.auth.default() loads the same variable
            # (which also silences the warning about files from untrusted sources).
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                credentials, project = google.auth.load_credentials_from_file(  # type: ignore[no-untyped-call]
                    str(path), scopes=[CLOUD_PLATFORM_SCOPE]
                )
            return credentials, project, "GOOGLE_APPLICATION_CREDENTIALS"
        credentials, project = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
    except exceptions.GoogleAuthError as exc:
        variable = "GOOGLE_APPLICATION_CREDENTIALS"
        raise ConfigError(f"{variable}: no usable Google credentials for Vertex AI: {exc}") from None
    return credentials, project, "application default credentials"


async def load_google_credentials(
    settings: Settings, *, clock: Callable[[], float] = time.time
) -> GoogleCredentials:
    """Load ADC off the event loop; raise ``ConfigError`` when there are none."""
    loop = asyncio.get_running_loop()
    credentials, project, source = await loop.run_in_executor(None, _load, settings)
    from gateway.providers.requests_egress import EgressRequestsSession

    http = EgressRequestsSession(settings.egress)
    return GoogleCredentials(
        project_id=project or None,
        source=source,
        http=http,
        tokens=TokenCache(
            _refresher(credentials, settings, http),
            clock=clock,
            health=CredentialHealth.for_egress(settings.egress),
        ),
    )
