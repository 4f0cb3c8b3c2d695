"""Authenticating requests to Bedrock: SigV4 from botocore's credential chain, or a Bedrock API key.

botocore is synchronous: resolve and refresh credentials in the default executor, never on the
event loop, and only when ``refresh_needed()`` says so. Secrets never reach a log line (botocore's
debug output is capped at INFO).

Details: docs/internals/gateway-providers.md
"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import ABC, abstractmethod
from typing import Any, Final
from urllib.parse import urlsplit

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import RefreshableCredentials
from botocore.exceptions import BotoCoreError, ProfileNotFound

from gateway.config import ConfigError, Settings
from gateway.echoed_secrets import remember
from gateway.errors import GatewayError
from gateway.providers.aws_egress import describe_aws_failure, egress_session
from gateway.providers.credentials_health import CredentialFailure, CredentialHealth
from gateway.providers.key_file import SIGHUP, KeyFile

log = logging.getLogger("switchyard.bedrock.auth")

SIGNING_NAME: Final = "bedrock"
MANDATORY_REFRESH_S: Final = 10 * 60  # botocore's _DEFAULT_MANDATORY_REFRESH_TIMEOUT
ADVISORY_RETRY_S: Final = 30.0
RESOLVE_RETRY_S: Final = 30.0
NO_CREDENTIALS: Final = (
    "no AWS credentials found: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE (shared "
    "credentials/config files), AWS_ROLE_ARN + AWS_WEB_IDENTITY_TOKEN_FILE, container credentials, "
    "or AWS_BEARER_TOKEN_BEDROCK"
)


def refresh_failed() -> GatewayError:
    return GatewayError(
        401,
        "the gateway's AWS credentials changed while they were being refreshed; retry",
        error_type="authentication_error",
        should_retry=True,
    )


def host_header(url: str) -> str:
    """The ``Host`` value an HTTP client sends for ``url`` (default ports omitted)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    default = 443 if parts.scheme == "https" else 80
    return host if parts.port in (None, default) else f"{host}:{parts.port}"


class BedrockAuth(ABC):
    """Adds Bedrock credentials to an outbound request."""

    source: str

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Resolve credentials (off the event loop)."""

    @abstractmethod
    def not_ready_reason(self) -> str | None:
        """``None`` when requests can be authenticated, else what is missing."""

    async def reload(self) -> bool:
        """Bedrock rejected the credentials: re-run the chain; ``True`` if they changed."""
        return False

    async def recheck(self) -> None:  # noqa: B027 - optional hook
        """Not ready because fetches failed: try once more (``/readyz`` calls this)."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release the credential calls' connections."""

    @abstractmethod
    async def authorize(
        self, method: str, url: str, headers: list[tuple[str, str]], body: bytes
    ) -> list[tuple[str, str]]:
        """The complete header list to send (``headers`` plus host, length and credentials)."""


def _with_framing(url: str, headers: list[tuple[str, str]], body: bytes) -> list[tuple[str, str]]:
    return [
        ("Host", host_header(url)),
        *headers,
        ("Content-Length", str(len(body))),
        ("Accept-Encoding", "gzip, deflate"),
    ]


class BearerAuth(BedrockAuth):
    """``Authorization: Bearer <AWS_BEARER_TOKEN_BEDROCK>``; with ``key_file`` (the token came from
    GATEWAY_BEDROCK_BEARER_TOKEN_FILE) the file is re-read when Bedrock refuses the token."""

    source = "bearer-token"

    def __init__(self, token: str, key_file: KeyFile | None = None) -> None:
        remember(token)  # redacted wherever an upstream echoes it
        self._authorization = f"Bearer {token}"
        self._key_file = key_file

    def not_ready_reason(self) -> str | None:
        return None

    async def reload(self) -> bool:
        """Bedrock refused the token: re-read its file; ``True`` if a new token is in use."""
        return self._key_file is not None and self._reread(self._key_file.refresh())

    def reload_key_file(self) -> bool | None:
        """``SIGHUP``: re-read GATEWAY_BEDROCK_BEARER_TOKEN_FILE; ``True`` if a new token is in use
        (``None``: the token came from AWS_BEARER_TOKEN_BEDROCK)."""
        return None if self._key_file is None else self._reread(self._key_file.reload(SIGHUP))

    def _reread(self, changed: bool) -> bool:
        if changed and self._key_file is not None:
            remember(self._key_file.key)
            self._authorization = f"Bearer {self._key_file.key}"
        return changed

    async def authorize(
        self, method: str, url: str, headers: list[tuple[str, str]], body: bytes
    ) -> list[tuple[str, str]]:
        if self._key_file is not None:
            self._key_file.sent()
        return [*_with_framing(url, headers, body), ("Authorization", self._authorization)]


class SigV4ChainAuth(BedrockAuth):
    """SigV4 with credentials from botocore's default chain, refreshed off the event loop."""

    def __init__(self, region: str, profile: str | None, settings: Settings) -> None:
        self._region = region
        self._profile = profile
        self._settings = settings
        self.health = CredentialHealth.for_egress(settings.egress)
        try:
            self._session = self._new_session()
        except ProfileNotFound:  # a start-up error in one line, not a traceback
            raise ConfigError(
                f"AWS_PROFILE: no profile {profile!r} in the shared config or credentials files"
            ) from None
        self._credentials: Any = None  # botocore Credentials / RefreshableCredentials
        self._frozen: Any = None  # botocore ReadOnlyCredentials
        self._refreshing: asyncio.Future[Any] | None = None
        self._resolving: asyncio.Future[Any] | None = None
        self._advisory_after = 0.0
        self._resolve_after = 0.0
        self._reload_after = 0.0
        self._problem: str | None = "AWS credentials not resolved yet"
        self._resolve_failure: CredentialFailure | None = None
        self.source = "none"
        logging.getLogger("botocore").setLevel(logging.INFO)  # its debug output shows secrets

    def _new_session(self) -> Any:
        bedrock = self._settings.bedrock
        return egress_session(
            self._settings.egress,
            self._region,
            self._profile,
            config_file=bedrock.config_file,
            credentials_file=bedrock.credentials_file,
        )

    async def start(self) -> None:
        await self._resolve()

    def not_ready_reason(self) -> str | None:
        return self._problem or self.health.not_ready_reason()

    async def close(self) -> None:
        self._session.close_http()

    async def recheck(self) -> None:
        if self.health.recheck_due():
            try:
                await self.current()
            except GatewayError:
                return

    async def reload(self) -> bool:
        """Re-run the whole chain in a fresh botocore session (at most every ``RESOLVE_RETRY_S``).

        Picks up rotated keys in shared files, a new web identity token, a new container role.
        """
        if time.monotonic() < self._reload_after or self._resolving is not None:
            return False
        self._reload_after = time.monotonic() + RESOLVE_RETRY_S
        before = self._frozen
        try:
            session = self._new_session()
        except ProfileNotFound:  # edited out of the files since start-up: keep what we have
            log.warning(
                "AWS credentials not reloaded: profile %r is no longer in the shared config or "
                "credentials files; still signing with the credentials resolved before",
                self._profile,
            )
            return False
        self._session.close_http()
        self._session = session
        await self._resolve()
        try:
            await self.current()
        except GatewayError:
            return False
        return bool(self._frozen != before)

    async def authorize(
        self, method: str, url: str, headers: list[tuple[str, str]], body: bytes
    ) -> list[tuple[str, str]]:
        frozen = await self.current()
        request = AWSRequest(
            method=method, url=url, data=body, headers=dict(_with_framing(url, headers, body))
        )
        SigV4Auth(frozen, SIGNING_NAME, self._region).add_auth(request)
        return list(request.headers.items())

    async def current(self) -> Any:
        """Frozen credentials fit to sign with now (refreshing first when botocore says so)."""
        for _ in range(3):  # a reload may swap the credentials while a refresh is in flight
            credentials = await self._resolved()
            if not isinstance(credentials, RefreshableCredentials):
                if self._frozen is None:
                    self._frozen = credentials.get_frozen_credentials()
            elif self._frozen is None or credentials.refresh_needed(MANDATORY_REFRESH_S):
                await self._refresh(credentials, mandatory=True)
            elif (
                credentials.refresh_needed()
                and self._refreshing is None
                and time.monotonic() >= self._advisory_after
            ):
                await self._refresh(credentials, mandatory=False)
            if self._frozen is not None:
                return self._frozen
        raise refresh_failed()

    async def _resolved(self) -> Any:
        """The credentials botocore's chain found (running it again at most every 30 s if none)."""
        if self._credentials is None and time.monotonic() >= self._resolve_after:
            await self._resolve()
        if self._credentials is None:
            if self._resolve_failure is not None:
                raise self._resolve_failure.as_gateway_error()
            raise GatewayError(
                503, self._problem or NO_CREDENTIALS, error_type="api_error", should_retry=False
            )
        return self._credentials

    async def _refresh(self, credentials: Any, *, mandatory: bool) -> None:
        if self._refreshing is None:
            loop = asyncio.get_running_loop()
            self._refreshing = loop.run_in_executor(None, credentials.get_frozen_credentials)
        refreshing = self._refreshing
        try:
            frozen = await asyncio.shield(refreshing)
        except Exception as exc:
            failure = describe_aws_failure(exc, self._settings.egress, self.source)
            if self._refreshing is refreshing:  # the first waiter to wake reports it, once
                self._refreshing = None
                self.health.failed(failure.message)
            if mandatory or self._frozen is None:
                raise failure.as_gateway_error() from None
            return
        if self._refreshing is refreshing:
            self._refreshing = None
            if frozen == self._frozen:
                self._advisory_after = time.monotonic() + ADVISORY_RETRY_S
            self._frozen = frozen
            self._problem = None
            self.health.succeeded()

    async def _resolve(self) -> None:
        """Run botocore's chain once (single flight) and remember what it found."""
        if self._resolving is None:
            self._resolving = asyncio.get_running_loop().run_in_executor(None, self._session.get_credentials)
        resolving = self._resolving
        failure: CredentialFailure | None = None
        try:
            credentials = await asyncio.shield(resolving)
        except (BotoCoreError, OSError, ValueError) as exc:
            credentials = None
            failure = describe_aws_failure(exc, self._settings.egress, "credential chain")
            problem: str | None = None
        else:
            problem = None if credentials is not None else NO_CREDENTIALS
        if self._resolving is not resolving:
            return
        self._resolving = None
        self._resolve_failure = failure
        if failure is not None:
            self.health.failed(failure.message)
        self._resolve_after = time.monotonic() + RESOLVE_RETRY_S
        self._credentials = credentials
        self._frozen = None  # derived from the new credentials at their first use
        self._refreshing = None
        self._problem = problem
        self.source = str(getattr(credentials, "method", "none")) if credentials is not None else "none"
        if problem is not None:
            log.warning("%s", problem)
