"""Headers every emulator response carries: request id, organization id and rate limits."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

from .config import EmulatorConfig
from .errors import ApiError, is_retryable

REQUESTS_LIMIT = 4_000
INPUT_TOKENS_LIMIT = 2_000_000
OUTPUT_TOKENS_LIMIT = 400_000
WINDOW_SECONDS = 60


def new_request_id() -> str:
    """``req_emu_`` plus 24 random hex characters."""
    return "req_emu_" + secrets.token_hex(12)


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def base_headers(
    config: EmulatorConfig, request_id: str, *, input_tokens: int = 0, output_tokens: int = 0
) -> dict[str, str]:
    """``request-id``, ``anthropic-organization-id`` and plausible ``anthropic-ratelimit-*`` headers."""
    now = config.clock.time()
    reset = _rfc3339(now + WINDOW_SECONDS)
    input_left = max(0, INPUT_TOKENS_LIMIT - input_tokens)
    output_left = max(0, OUTPUT_TOKENS_LIMIT - output_tokens)
    return {
        "request-id": request_id,
        "anthropic-organization-id": config.organization_id,
        "anthropic-ratelimit-requests-limit": str(REQUESTS_LIMIT),
        "anthropic-ratelimit-requests-remaining": str(REQUESTS_LIMIT - 1),
        "anthropic-ratelimit-requests-reset": _rfc3339(now + WINDOW_SECONDS / REQUESTS_LIMIT),
        "anthropic-ratelimit-input-tokens-limit": str(INPUT_TOKENS_LIMIT),
        "anthropic-ratelimit-input-tokens-remaining": str(input_left),
        "anthropic-ratelimit-input-tokens-reset": reset,
        "anthropic-ratelimit-output-tokens-limit": str(OUTPUT_TOKENS_LIMIT),
        "anthropic-ratelimit-output-tokens-remaining": str(output_left),
        "anthropic-ratelimit-output-tokens-reset": reset,
        "anthropic-ratelimit-tokens-limit": str(INPUT_TOKENS_LIMIT + OUTPUT_TOKENS_LIMIT),
        "anthropic-ratelimit-tokens-remaining": str(input_left + output_left),
        "anthropic-ratelimit-tokens-reset": reset,
    }


def error_headers(config: EmulatorConfig, error: ApiError) -> dict[str, str]:
    """Retry hints for an error: ``retry-after`` on 429, ``retry-after-ms`` when configured."""
    headers: dict[str, str] = {}
    if error.status == 429:
        headers["retry-after"] = str(config.retry_after_s)
        headers["anthropic-ratelimit-requests-remaining"] = "0"
    if config.retry_after_ms is not None and is_retryable(error.status):
        headers["retry-after-ms"] = f"{config.retry_after_ms:g}"
    headers.update(error.headers)
    return headers
