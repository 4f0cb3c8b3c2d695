"""The cross-field checks of the fleet sign-in settings (``GATEWAY_OIDC_*``, ``GATEWAY_PUBLIC_URL``).

Registered in ``Settings._cross_field_checks``; each problem is a ``ValueError`` naming the variable.
Sign-in is on when ``GATEWAY_OIDC_ISSUER`` is set: it then needs the public URL and a client id,
and both URLs must be ``https`` unless they are loopback ``http`` URLs and
``GATEWAY_ALLOW_INSECURE_LOOPBACK=1`` (development and tests).
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Final, Protocol
from urllib.parse import urlsplit

from pydantic import SecretStr

FIELDS: Final = frozenset(
    {
        "signin.public_url",
        "signin.oidc_issuer",
        "signin.oidc_client_id",
        "signin.oidc_client_secret",
        "signin.oidc_client_secret_file",
        "signin.allow_insecure_loopback",
        "signin.token_signing_keys_file",
        "signin.signin_state_dir",
    }
)


class SigninFields(Protocol):
    @property
    def public_url(self) -> str | None: ...
    @property
    def oidc_issuer(self) -> str | None: ...
    @property
    def oidc_client_id(self) -> str | None: ...
    @property
    def oidc_client_secret(self) -> SecretStr | None: ...
    @property
    def oidc_client_secret_file(self) -> Path | None: ...
    @property
    def allow_insecure_loopback(self) -> bool: ...
    @property
    def token_signing_keys_file(self) -> Path | None: ...
    @property
    def signin_state_dir(self) -> Path | None: ...


def is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_scheme(variable: str, url: str, allow_loopback: bool) -> None:
    if url.startswith("https://"):
        return
    if not is_loopback(url):
        raise ValueError(f"{variable}: must be an https:// URL (http is allowed for loopback only)")
    if not allow_loopback:
        raise ValueError(f"{variable}: a loopback http:// URL needs GATEWAY_ALLOW_INSECURE_LOOPBACK=1")


def check(settings: SigninFields) -> None:
    """Raise ``ValueError("VARIABLE: ...")`` for the first problem of the sign-in settings."""
    if settings.oidc_client_secret is not None and settings.oidc_client_secret_file is not None:
        raise ValueError("GATEWAY_OIDC_CLIENT_SECRET_FILE: set it or GATEWAY_OIDC_CLIENT_SECRET, not both")
    if settings.token_signing_keys_file is not None:
        from gateway.fleet.signing_keys import parse_signing_keys

        try:
            parse_signing_keys(settings.token_signing_keys_file.read_text("utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise ValueError(f"GATEWAY_TOKEN_SIGNING_KEYS_FILE: {exc}") from None
    if settings.signin_state_dir is not None and not settings.signin_state_dir.is_dir():
        raise ValueError("GATEWAY_SIGNIN_STATE_DIR: not a directory")
    if settings.oidc_issuer is None:
        return
    try:
        import authlib  # noqa: F401
        import joserfc  # noqa: F401
    except ImportError:
        raise ValueError(
            "GATEWAY_OIDC_ISSUER: sign-in needs authlib and joserfc (pip install 'switchyard[fleet]')"
        ) from None
    if settings.public_url is None:
        raise ValueError("GATEWAY_PUBLIC_URL: sign-in (GATEWAY_OIDC_ISSUER) needs the gateway's public URL")
    if not settings.oidc_client_id:
        raise ValueError("GATEWAY_OIDC_CLIENT_ID: sign-in (GATEWAY_OIDC_ISSUER) needs the client id")
    _check_scheme("GATEWAY_OIDC_ISSUER", settings.oidc_issuer, settings.allow_insecure_loopback)
    _check_scheme("GATEWAY_PUBLIC_URL", settings.public_url, settings.allow_insecure_loopback)
