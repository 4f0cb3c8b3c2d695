"""Bearer tokens an emulator's token endpoint issued, valid until they expire on its clock.

Shared by the Google (:mod:`.google_oauth`) and Entra ID (:mod:`.entra_oauth`) token endpoints.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from aiohttp import web


@dataclass(frozen=True, slots=True)
class IssuedToken:
    token: str
    subject: str
    """Who it was issued to (service-account email, Entra client id)."""
    scope: str
    expires_at: float
    """Emulator clock time (Unix seconds)."""


class TokenRegistry:
    """Thread-safe: issued tokens by value; counts how many were issued."""

    def __init__(self) -> None:
        self._tokens: dict[str, IssuedToken] = {}
        self._lock = threading.Lock()

    def issue(self, prefix: str, subject: str, scope: str, expires_at: float) -> IssuedToken:
        issued = IssuedToken(prefix + secrets.token_urlsafe(24), subject, scope, expires_at)
        with self._lock:
            self._tokens[issued.token] = issued
        return issued

    def lookup(self, token: str) -> IssuedToken | None:
        """The issued token (expired or not), or ``None`` if this emulator never issued it."""
        with self._lock:
            return self._tokens.get(token)

    def __len__(self) -> int:
        with self._lock:
            return len(self._tokens)


TOKENS_KEY: web.AppKey[TokenRegistry] = web.AppKey("emulator_tokens", TokenRegistry)


def get_tokens(app: web.Application) -> TokenRegistry:
    """The tokens issued by a Vertex or Foundry emulator app."""
    return app[TOKENS_KEY]


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer`` header, else ``None``."""
    if authorization is None:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def form_text(form: Mapping[str, object], name: str) -> str | None:
    """A text field of a posted form (``None`` when absent or a file)."""
    value = form.get(name)
    return value if isinstance(value, str) else None
