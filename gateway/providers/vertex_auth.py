"""Google credentials for Vertex AI: Application Default Credentials through google-auth.

google-auth is imported inside functions (a gateway without Vertex never loads it); its refresh
runs in the default executor, one at a time, through the gateway's egress settings. Credentials
from a file are re-read when Google refuses them and on ``SIGHUP`` (:mod:`.google_key_file`).

Details: docs/internals/gateway-providers.md
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import math
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from gateway.config import ConfigError, Settings
from gateway.egress import classify_sync, host_port
from gateway.providers.credentials_health import CredentialFailure, CredentialHealth
from gateway.providers.google_key_file import (
    CLOUD_PLATFORM_SCOPE,
    REFUSED,
    SIGHUP,
    VARIABLE,
    GoogleKeyFile,
    UnusableFile,
    load_file,
)
from gateway.providers.token_cache import TokenCache, TokenFetch
from gateway.transport import proxy_for

log = logging.getLogger("switchyard.vertex_auth")

T = TypeVar("T")

# the token cache and access token the current task's last attempt went out with: a request Vertex
# refused with a token another request has replaced since retries with the new one, no fetch of its own
_SENT: ContextVar[tuple[TokenCache, str] | None] = ContextVar("switchyard_google_token_sent", default=None)


@dataclass(frozen=True, slots=True)
class GoogleCredentials:
    """Loaded ADC: the project they name (if any), where they came from, and their token."""

    project_id: str | None
    source: str
    tokens: TokenCache
    http: Any = None  # the requests session of the token calls (closed with the provider)
    key_file: GoogleKeyFile | None = None  # GOOGLE_APPLICATION_CREDENTIALS' file (None: ADC)
    refetch: TokenFetch | None = None  # the fetch after Vertex refused a token (reads the file first)

    def close(self) -> None:
        if self.http is not None:
            self.http.close()

    async def bearer(self) -> str:
        """A valid access token, refreshed when due; failures become Anthropic-shaped errors.

        Notes it as the token this task's attempt goes out with (one context-variable set)."""
        token = await _mapped(self.tokens.token())
        _SENT.set((self.tokens, token))
        return token

    async def refresh(self) -> bool:
        """Vertex rejected the token this task sent: ``True`` if the next attempt goes with another
        one, already in use (another request refused with it got it) or fetched now, after the
        credentials file was read again (new credentials if its content changed)."""
        sent = _SENT.get()
        if sent is not None and sent[0] is self.tokens and self.tokens.cached != sent[1]:
            return True
        return await _mapped(self.tokens.refresh(self.refetch))

    async def reload_file(self) -> bool:
        """``SIGHUP``: re-read the credentials file off the event loop; with new credentials, the
        cached token (minted with the old key) is dropped so the next request uses the new key."""
        key_file = self.key_file
        if key_file is None:
            return False
        changed = await asyncio.get_running_loop().run_in_executor(None, key_file.reload, SIGHUP)
        if changed:
            self.tokens.invalidate()
        return changed


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


def _refused(exc: BaseException) -> bool:
    """Whether the token endpoint refused the credential itself (not a network or Google failure)."""
    from google.auth.exceptions import RefreshError

    return isinstance(exc, RefreshError) and not getattr(exc, "retryable", False)


def _renewed(key_file: GoogleKeyFile, generation: int) -> bool:
    """Google refused the key of ``generation``: are newer credentials in use now (read from the
    file now, or by a ``SIGHUP`` job meanwhile)?"""
    return key_file.reload(REFUSED) or key_file.generation != generation


def _refresher(
    fixed: Any, key_file: GoogleKeyFile | None, settings: Settings, http: Any, *, reread: bool = False
) -> TokenFetch:
    """The blocking token fetch of ``key_file``'s credentials (``fixed``'s without a file).

    With a file: read it first (``reread``: Vertex refused a token), or after the token endpoint
    refused the key; new content means new credentials, tried at once (once per fetch)."""
    from google.auth.exceptions import GoogleAuthError
    from google.auth.transport.requests import Request

    request = Request(session=http)

    def fetch() -> tuple[str, float]:
        if key_file is not None and reread:
            key_file.reload(REFUSED)
        credentials = fixed if key_file is None else key_file.credentials
        generation = 0 if key_file is None else key_file.generation
        try:
            credentials.refresh(request)
        except (GoogleAuthError, OSError) as exc:
            if key_file is None or reread or not _refused(exc) or not _renewed(key_file, generation):
                log.debug("Google token refresh failed: %s", type(exc).__name__)
                raise describe_google_failure(exc, credentials, settings) from None
            credentials = key_file.credentials  # the file changed: its new credentials, once
            try:
                credentials.refresh(request)
            except (GoogleAuthError, OSError) as again:
                log.debug("Google token refresh with the re-read file failed: %s", type(again).__name__)
                raise describe_google_failure(again, credentials, settings) from None
        token = credentials.token
        if not isinstance(token, str) or not token:
            raise CredentialFailure(f"{PREFIX}: the refresh returned no access token")
        return token, _expiry_seconds(credentials.expiry)

    return fetch


def _load(settings: Settings) -> tuple[Any, str | None, str, GoogleKeyFile | None]:
    """Blocking: find the credentials (ADC may probe the metadata server)."""
    import google.auth
    from google.auth import exceptions

    path = settings.vertex.credentials_file
    if path is not None:
        try:
            loaded = load_file(path)
        except UnusableFile as exc:
            raise ConfigError(f"{VARIABLE}: no usable Google credentials for Vertex AI: {exc}") from None
        return loaded.credentials, loaded.project_id, VARIABLE, GoogleKeyFile(path, loaded)
    try:
        credentials, project = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
    except exceptions.GoogleAuthError as exc:
        raise ConfigError(f"{VARIABLE}: no usable Google credentials for Vertex AI: {exc}") from None
    return credentials, project, "application default credentials", None


async def load_google_credentials(
    settings: Settings, *, clock: Callable[[], float] = time.time
) -> GoogleCredentials:
    """Load ADC off the event loop; raise ``ConfigError`` when there are none."""
    loop = asyncio.get_running_loop()
    credentials, project, source, key_file = await loop.run_in_executor(None, _load, settings)
    from gateway.providers.requests_egress import EgressRequestsSession

    http = EgressRequestsSession(settings.egress)
    return GoogleCredentials(
        project_id=project or None,
        source=source,
        http=http,
        key_file=key_file,
        refetch=None if key_file is None else _refresher(credentials, key_file, settings, http, reread=True),
        tokens=TokenCache(
            _refresher(credentials, key_file, settings, http),
            clock=clock,
            health=CredentialHealth.for_egress(settings.egress),
        ),
    )
