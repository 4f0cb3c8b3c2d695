"""Credentials an upstream (or a proxy in front of it) may echo back in an error, redacted.

Each upstream credential the gateway sends (an API key, a Bedrock API key, a key read from a key
file) is remembered here when it is put in use. Upstream error text the gateway passes on or
logs goes through :func:`redact` first: a remembered credential, a bearer token, an Anthropic key,
a Google access token and the values of a signed URL's credential parameters (``X-Amz-Signature``,
``X-Goog-Credential``, ``sig``, ``key``...) become ``***``. Only error text is scanned, never a
relayed stream or a successful answer.
"""

from __future__ import annotations

import re
from typing import Final

MASK: Final = "***"
_MIN_LENGTH: Final = 8  # shorter "secrets" (a test's "x") would mask ordinary words
_MAX_REMEMBERED: Final = 64  # rotated keys accumulate: the newest are kept

_remembered: dict[str, None] = {}  # insertion-ordered: the oldest is dropped first

_PATTERNS: Final = (
    (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{8,}"), r"\1" + MASK),
    (re.compile(r"\b(sk-ant-)[A-Za-z0-9_-]{6,}"), r"\1" + MASK),
    (re.compile(r"\b(ya29\.)[A-Za-z0-9._-]+"), r"\1" + MASK),
    (  # also inside JSON text (a first-party error body is redacted as bytes): ``&`` may come
        # as ``\u0026``, and a value ends at any other backslash (``\"``: the quote stays escaped)
        re.compile(
            r"(?i)((?:[?&;]|\\u0026)(?:x-amz-signature|x-amz-credential|x-amz-security-token"
            r"|x-goog-signature|x-goog-credential|signature|sig|se|skoid|sktid|token|access_token|key"
            r"|api-key|api_key|subscription-key|code)=)(?:[^&\s\"'<>\\]|\\/)+"
        ),
        r"\1" + MASK,
    ),
)


def remember(secret: str) -> None:
    """``secret`` is sent upstream from now on: redact it wherever an upstream echoes it."""
    if len(secret) >= _MIN_LENGTH and secret not in _remembered:
        _remembered[secret] = None
        while len(_remembered) > _MAX_REMEMBERED:
            del _remembered[next(iter(_remembered))]


def redact(text: str) -> str:
    """``text`` without any remembered credential, bearer token or signed-URL credential."""
    for secret in tuple(_remembered):  # (a snapshot: another thread may remember one meanwhile)
        if secret in text:
            text = text.replace(secret, MASK)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def redact_bytes(body: bytes) -> bytes:
    """:func:`redact` for a body; the same bytes when there is nothing to redact."""
    text = body.decode("utf-8", "replace")
    cleaned = redact(text)
    return body if cleaned == text else cleaned.encode()
