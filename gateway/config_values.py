"""Parsing raw environment strings into setting values: flags, readable files, URLs, lists, JSON.

Used by the field validators of the settings sections (:mod:`gateway.settings`); every error
message names what is wrong without echoing a secret.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from gateway import config_checks

TRUTHY: Final = frozenset({"1", "true", "yes", "on"})
FALSY: Final = frozenset({"", "0", "false", "no", "off"})


def flag(value: object) -> object:
    """``1/true/yes/on`` and ``0/false/no/off`` (any case, blank is false) as booleans; else as is."""
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in TRUTHY:
            return True
        if lowered in FALSY:
            return False
    return value


def existing_file(value: object) -> object:
    """A readable file's path (``~`` expanded), ``None`` for blank."""
    if value in (None, ""):
        return None
    path = Path(str(value)).expanduser()
    if not path.is_file():
        raise ValueError(f"file not found: {path}")
    if not os.access(path, os.R_OK):
        raise ValueError(f"file not readable: {path}")
    return path


def http_url(value: str) -> str:
    """An http(s) URL with a host and a valid port, without a trailing slash; errors never show
    the URL's credentials (nor the value at all when it holds whitespace or control characters)."""
    if any(ord(char) <= 0x20 or ord(char) == 0x7F for char in value):
        raise ValueError("a URL holds no whitespace or control character (the value is not shown)")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {config_checks.redact_url(value)!r}")
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number in 0-65535
    except ValueError:
        raise ValueError(f"invalid port in URL {config_checks.redact_url(value)!r}") from None
    return value.rstrip("/")


def blank_is_none(value: object) -> object:
    """A string stripped, ``None`` when blank; anything else as is."""
    if isinstance(value, str):
        return value.strip() or None
    return value


def empty_is_none(value: object) -> object:
    """``None`` for an empty string (a secret is never stripped)."""
    return None if value == "" else value


def comma_set(value: object) -> object:
    """``a,b`` as ``frozenset({"a", "b"})``; a false word (``0``, ``off``, blank) is the empty set."""
    if isinstance(value, str):
        if value.strip().lower() in FALSY:
            return frozenset()
        return frozenset(item.strip() for item in value.split(",") if item.strip())
    return value


def optional_url(value: object) -> object:
    """An http(s) URL without its userinfo (never sent upstream nor logged), ``None`` for blank."""
    if value in (None, ""):
        return None
    return config_checks.without_userinfo(http_url(str(value)))


def proxy_url(value: object) -> object:
    """A proxy URL (curl convention: a bare ``host:port`` means ``http://``), ``None`` for blank."""
    if value in (None, ""):
        return None
    text = str(value)
    if "://" not in text:
        text = "http://" + text
    return http_url(text)


def json_or_file(value: object) -> object:
    """A JSON object given as text or as the path of a file holding it (blank: ``{}``)."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if not text:
        return {}
    if not text.startswith("{"):
        path = Path(text).expanduser()
        if not path.is_file():
            raise ValueError(f"neither a JSON object nor a readable file: {text!r}")
        text = path.read_text(encoding="utf-8")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON: {exc}") from None
