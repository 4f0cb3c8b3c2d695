"""What a client may see of a cloud upstream's error message.

Cloud error messages can carry account ids, ARNs, project ids and resource names. The gateway logs
the original for the operator and sends the client a generic message that keeps the error type and
the mapped status — except for the messages clients' recovery logic keys on:

* a 400 or 413 in Anthropic's own error envelope (e.g. ``prompt is too long: 210000 tokens >
  200000 maximum``) is relayed as it is;
* Bedrock's 400 whose whole message is ``Input is too long.`` is relayed exactly;
* Vertex's request-size 400 (``The request size (N bytes) exceeds 30.000MB limit.`` or ``The
  message size ...``) is sent as ``Input is too long.``.
"""

from __future__ import annotations

import logging
import re
from typing import Final

from gateway.echoed_secrets import redact

log = logging.getLogger("switchyard.upstream_errors")

INPUT_TOO_LONG: Final = "Input is too long."
_VERTEX_SIZE = re.compile(r"^The (request|message) size .*exceeds", re.IGNORECASE)

GENERIC: Final[dict[str, str]] = {
    "invalid_request_error": "The upstream rejected the request as invalid.",
    "authentication_error": "The gateway's upstream credential was rejected.",
    "permission_error": "The gateway's upstream credential is not allowed to do this.",
    "not_found_error": "The upstream could not find the requested model or resource.",
    "request_too_large": "The request is too large for the upstream.",
    "rate_limit_error": "The upstream is rate limiting requests; retry later.",
    "timeout_error": "The upstream timed out.",
    "overloaded_error": "The upstream is overloaded; retry later.",
    "api_error": "The upstream failed to process the request.",
    "not_supported": "The upstream does not support this request.",
}


def client_message(
    provider: str,
    status: int,
    error_type: str,
    message: str,
    *,
    anthropic_envelope: bool,
    request_id: str,
) -> str:
    """The message to send the client for an upstream error (the original is logged here; a
    credential or signed URL the upstream echoed is redacted from both)."""
    message = redact(message)
    log.warning(
        "upstream error provider=%s status=%s type=%s request_id=%s message=%s",
        provider,
        status,
        error_type,
        request_id,
        message,
    )
    if status in (400, 413) and anthropic_envelope:
        return message
    if status == 400 and provider == "bedrock" and message.strip() == INPUT_TOO_LONG:
        return INPUT_TOO_LONG
    if status == 400 and provider == "vertex" and _VERTEX_SIZE.match(message.strip()):
        return INPUT_TOO_LONG
    generic = GENERIC.get(error_type, GENERIC["api_error"])
    return f"{generic} (request id {request_id})"
