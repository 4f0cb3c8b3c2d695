"""HTTP-level failures as stream event dicts, so every caller reports errors the same way."""

from __future__ import annotations

import orjson

from gateway.errors import error_type_for_status
from loop.messages import JSONObject


def error_event(error_type: str, message: str, status: int | None = None) -> JSONObject:
    """``{"type": "error", "error": {...}}`` plus ``status`` when an HTTP status was received."""
    event: JSONObject = {"type": "error", "error": {"type": error_type, "message": message}}
    if status is not None:
        event["status"] = status
    return event


def error_event_from_body(status: int, body: bytes) -> JSONObject:
    """An error response (Anthropic envelope when present; the status decides otherwise)."""
    error_type, message = error_type_for_status(status), f"HTTP {status}"
    try:
        parsed = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        error = parsed["error"]
        error_type = str(error.get("type") or error_type)
        message = str(error.get("message") or message)
    elif body:
        message = f"HTTP {status}: {body[:200].decode('utf-8', 'replace')}"
    return error_event(error_type, message, status)
