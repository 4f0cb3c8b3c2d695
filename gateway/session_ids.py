"""Which client session a request belongs to, from what Claude Code and other clients send.

Sources in precedence order; a value is used only if it looks like an id. Session ids go to logs
and the session store, never to metric labels.

Details: docs/internals/gateway.md
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

import orjson

from gateway.headers import FALLBACK_SESSION_HEADER, SESSION_HEADER, ClientHeaders

_SESSION_HEADER_LEN: Final = len(SESSION_HEADER)
_FALLBACK_LEN: Final = len(FALLBACK_SESSION_HEADER)

_SESSION_ID = re.compile(r"^[A-Za-z0-9._:@+=/-]{1,128}$")
_LEGACY_USER_ID = re.compile(r"_session_([A-Za-z0-9-]{1,128})$")

Headers = Mapping[str, str] | Iterable[tuple[str, str]]


def session_id_of(headers: Headers, payload: Mapping[str, Any]) -> str | None:
    """The request's session id, or ``None`` when it carries none."""
    if isinstance(headers, ClientHeaders):  # found when the list was made
        primary, fallback = headers.session, headers.fallback_session
    else:
        primary, fallback = _session_headers(headers)
    found = _id_like(primary)
    if found is None:  # the body is read only when the header gives nothing
        found = _id_like(_from_metadata(payload))
    return found if found is not None else _id_like(fallback)


def _session_headers(headers: Headers) -> tuple[str | None, str | None]:
    """The first session header and the first fallback session header (case-insensitively)."""
    primary = fallback = None
    for key, value in (
        headers if isinstance(headers, list) else headers.items() if isinstance(headers, Mapping) else headers
    ):
        size = len(key)  # the length first: most headers are neither, and lower() is not free
        if size == _SESSION_HEADER_LEN and primary is None and key.lower() == SESSION_HEADER:
            primary = value  # the first one, like the fallback below
        elif size == _FALLBACK_LEN and fallback is None and key.lower() == FALLBACK_SESSION_HEADER:
            fallback = value
    return primary, fallback


def _id_like(candidate: str | None) -> str | None:
    if candidate is None:
        return None
    value = candidate.strip()
    return value if _SESSION_ID.match(value) else None


def _from_metadata(payload: Mapping[str, Any]) -> str | None:
    metadata = payload.get("metadata")
    if not isinstance(metadata, dict):
        return None
    user_id = metadata.get("user_id")
    if not isinstance(user_id, str):
        return None
    text = user_id.strip()
    if text.startswith("{"):
        try:
            parsed = orjson.loads(text)
        except orjson.JSONDecodeError:
            return None
        session = parsed.get("session_id") if isinstance(parsed, dict) else None
        return session if isinstance(session, str) else None
    legacy = _LEGACY_USER_ID.search(text)
    return legacy.group(1) if legacy else None
