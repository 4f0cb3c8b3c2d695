"""Fleet sign-in settings: the company IdP (OIDC), the gateway's public URL and its tokens.
Sign-in is on when ``GATEWAY_OIDC_ISSUER`` is set (cross-field rules: ``gateway.fleet.signin_rules``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, ClassVar, Final

from pydantic import BeforeValidator, Field, SecretStr, field_validator

from gateway.config_values import empty_is_none, http_url
from gateway.settings.section import CommaSet, Flag, OptionalText, OptionalUrl, ReadableFile, Section

_TAG: Final = re.compile(r"[A-Za-z0-9_.:/=+\-@]{1,64}")


def _directory(value: object) -> object:
    """A path, ``None`` when blank (whether it is a directory is a cross-field check's)."""
    if value in (None, ""):
        return None
    return Path(str(value))


class SigninSettings(Section):
    """Sign-in through the company IdP (`/login` in Claude Code)."""

    title: ClassVar[str] = "Fleet sign-in (GATEWAY_OIDC_ISSUER turns it on)"

    public_url: OptionalUrl = Field(None, alias="GATEWAY_PUBLIC_URL")
    """The base URL clients use (https; loopback http with GATEWAY_ALLOW_INSECURE_LOOPBACK=1)."""
    oidc_issuer: str | None = Field(None, alias="GATEWAY_OIDC_ISSUER")
    """The company IdP's OIDC issuer URL; setting it turns sign-in (`/login`) on."""
    oidc_client_id: OptionalText = Field(None, alias="GATEWAY_OIDC_CLIENT_ID")
    """The gateway's client id at the IdP (redirect URI `{GATEWAY_PUBLIC_URL}/oauth/callback`)."""
    oidc_client_secret: Annotated[SecretStr | None, BeforeValidator(empty_is_none)] = Field(
        None, alias="GATEWAY_OIDC_CLIENT_SECRET"
    )
    """The gateway's client secret at the IdP (unset: a public client, PKCE only)."""
    oidc_client_secret_file: ReadableFile = Field(None, alias="GATEWAY_OIDC_CLIENT_SECRET_FILE")
    """A file holding the client secret (instead of GATEWAY_OIDC_CLIENT_SECRET)."""
    oidc_groups_claim: str = Field("groups", alias="GATEWAY_OIDC_GROUPS_CLAIM")
    """The ID-token claim holding the user's groups: a name or a dotted path (`realm_access.roles`)."""
    oidc_scopes: str = Field("openid email profile", alias="GATEWAY_OIDC_SCOPES")
    """Scopes asked of the IdP (add `offline_access` where the IdP needs it for a refresh token)."""
    signin_email_domains: CommaSet = Field(frozenset(), alias="GATEWAY_SIGNIN_EMAIL_DOMAINS")
    """Comma-separated e-mail domains allowed to sign in (unset: any verified IdP user)."""
    token_signing_keys_file: ReadableFile = Field(None, alias="GATEWAY_TOKEN_SIGNING_KEYS_FILE")
    """Access-token signing keys, `kid secret` per line, the first signs (unset: generated, stored)."""
    allow_insecure_loopback: Flag = Field(False, alias="GATEWAY_ALLOW_INSECURE_LOOPBACK")
    """`1`: allow http:// for a loopback IdP and public URL (development and tests only)."""
    access_token_ttl_s: int = Field(3600, alias="GATEWAY_ACCESS_TOKEN_TTL_S", ge=60, le=86400)
    """Lifetime of a sign-in access token (a signed JWT), seconds."""
    refresh_token_ttl_s: int = Field(30 * 86400, alias="GATEWAY_REFRESH_TOKEN_TTL_S", ge=300)
    """A sign-in lasts this long without a refresh, seconds (each refresh rotates and extends it)."""
    signin_state_dir: Annotated[Path | None, BeforeValidator(_directory)] = Field(
        None, alias="GATEWAY_SIGNIN_STATE_DIR"
    )
    """Directory of the embedded sign-in store (sqlite); unset: in memory (a restart signs all out)."""
    signin_verify_per_minute: int = Field(10, alias="GATEWAY_SIGNIN_VERIFY_PER_MINUTE", ge=1)
    """Verification-page form submissions allowed per client IP per minute."""
    billing_group_tag: OptionalText = Field(None, alias="GATEWAY_BILLING_GROUP_TAG")
    """Off by default. A tag name (`team`): access tokens carry it as the `billing_group_tag` claim, and a request's `tags[<name>]` picks which of the caller's groups pays (its group pool) and labels its telemetry; `tags` is never sent to Bedrock or Vertex."""
    signin_login_notice: OptionalText = Field(None, alias="GATEWAY_SIGNIN_LOGIN_NOTICE", max_length=500)
    """Plain text Claude Code shows beside the user code at `/login` (at most 500 characters)."""

    @field_validator("billing_group_tag")
    @classmethod
    def _check_tag(cls, value: str | None) -> str | None:
        """The rule Claude Code 2.1.332's own gateway applies to ``admin.billing_group_tag``: 1 to 64
        ASCII letters, digits or ``_ . : / = + - @``, not starting with ``anthropic`` (any case)."""
        if value is not None and (not _TAG.fullmatch(value) or value.lower().startswith("anthropic")):
            raise ValueError(
                "must be 1 to 64 characters, each an ASCII letter, a digit or one of _ . : / = + - @, "
                "and must not start with 'anthropic'"
            )
        return value

    @field_validator("oidc_issuer", mode="before")
    @classmethod
    def _check_issuer(cls, value: object) -> object:
        """An http(s) URL kept exactly as given: the ID token's ``iss`` must equal it (trailing slash too)."""
        if value in (None, ""):
            return None
        http_url(str(value))
        return str(value)
