"""Google credentials for Vertex AI: Application Default Credentials through google-auth.

* ``GOOGLE_APPLICATION_CREDENTIALS`` (from the settings snapshot) names a credentials file
  (service account, authorized user, external account...): loaded with
  ``google.auth.load_credentials_from_file``; otherwise ``google.auth.default()`` walks the ADC
  chain (gcloud user credentials, the GCE / GKE metadata server...). Scope: ``cloud-platform``.
* google-auth is synchronous and its refresh does network I/O: the token lives in a
  :class:`~gateway.providers.token_cache.TokenCache`, refreshed in the default executor, one refresh
  at a time, ``DEFAULT_REFRESH_MARGIN_S`` before expiry (google-auth's own ``expired`` already
  counts ``REFRESH_THRESHOLD``, 3 min 45 s, early; the margin is measured on the provider's clock).
* The token endpoint is reached with google-auth's ``requests`` transport: proxies from the
  standard ``HTTPS_PROXY`` / ``NO_PROXY`` variables (requests reads them, as google-auth always
  does), CA bundle from ``GATEWAY_CA_BUNDLE`` / ``SSL_CERT_FILE`` when set.
* A refresh the token endpoint refuses (revoked key, deleted account) is 401
  ``authentication_error`` with ``x-should-retry: false``; an unreachable token endpoint is 502.

google-auth is imported here, inside functions, so a gateway that does not use Vertex never
loads it.
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
from gateway.errors import GatewayError
from gateway.providers.token_cache import TokenCache, TokenFetch

log = logging.getLogger("switchyard.vertex_auth")

CLOUD_PLATFORM_SCOPE: Final = "https://www.googleapis.com/auth/cloud-platform"

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class GoogleCredentials:
    """Loaded ADC: the project they name (if any), where they came from, and their token."""

    project_id: str | None
    source: str
    tokens: TokenCache

    async def bearer(self) -> str:
        """A valid access token, refreshed when due; failures become Anthropic-shaped errors."""
        return await _mapped(self.tokens.token())

    async def refresh(self) -> bool:
        """Fetch a new token now (Vertex rejected the cached one); ``True`` if it changed."""
        return await _mapped(self.tokens.refresh())


async def _mapped(call: Awaitable[T]) -> T:
    """Await a token operation, turning google-auth failures into gateway errors."""
    from google.auth import exceptions

    try:
        return await call
    except exceptions.RefreshError as exc:
        log.warning("Google token refresh refused: %s", exc)
        if getattr(exc, "retryable", False):
            raise GatewayError(
                503, "The gateway could not refresh its upstream credential; retry later."
            ) from None
        raise GatewayError(
            401,
            "The gateway's upstream credential has expired and could not be refreshed.",
            error_type="authentication_error",
            should_retry=False,
        ) from None
    except exceptions.TransportError as exc:
        log.warning("Google token endpoint unreachable: %s", exc)
        raise GatewayError(502, "The gateway could not reach its credential provider.") from None
    except exceptions.GoogleAuthError as exc:
        log.warning("Google credentials failed: %s", exc)
        raise GatewayError(
            401,
            "The gateway's upstream credential could not be used.",
            error_type="authentication_error",
            should_retry=False,
        ) from None


def _expiry_seconds(expiry: datetime.datetime | None) -> float:
    """google-auth's naive-UTC ``expiry`` as Unix seconds (``inf`` when the token never expires)."""
    if expiry is None:
        return math.inf
    if expiry.tzinfo is None:
        expiry = expiry.replace(tzinfo=datetime.UTC)
    return expiry.timestamp()


def _refresher(credentials: Any, settings: Settings) -> TokenFetch:
    from google.auth.exceptions import RefreshError
    from google.auth.transport.requests import Request

    request = Request()
    if settings.ca_bundle is not None:
        request.session.verify = str(settings.ca_bundle)

    def fetch() -> tuple[str, float]:
        credentials.refresh(request)
        token = credentials.token
        if not isinstance(token, str) or not token:
            raise RefreshError("the credentials were refreshed but hold no access token")  # type: ignore[no-untyped-call]
        return token, _expiry_seconds(credentials.expiry)

    return fetch


def _load(settings: Settings) -> tuple[Any, str | None, str]:
    """Blocking: find the credentials (ADC may probe the metadata server)."""
    import google.auth
    from google.auth import exceptions

    path = settings.google_application_credentials
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
    return GoogleCredentials(
        project_id=project or None,
        source=source,
        tokens=TokenCache(_refresher(credentials, settings), clock=clock),
    )
