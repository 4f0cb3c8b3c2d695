"""Parsing raw environment strings into setting values: flags, readable files, http(s) URLs.

Used by the field validators of :class:`gateway.config.Settings`; every error message names what
is wrong without echoing a secret.
"""

from __future__ import annotations

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
