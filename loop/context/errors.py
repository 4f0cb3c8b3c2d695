"""Recognising "the prompt does not fit" in an upstream's answer, and what it says about the limit.

Every recognised shape cites its source (providers.md sections 5 and 9, the emulators, public
reports); the list is in the design document.

Details: docs/internals/loop-context.md
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from loop.outcome import ApiErrorInfo


class ContextErrorKind(enum.StrEnum):
    PROMPT_TOO_LONG = "prompt_too_long"
    REQUEST_TOO_LARGE = "request_too_large"
    INPUT_TOO_LONG = "input_too_long"
    OUTPUT_OVERFLOW = "context_overflow"
    """Input + ``max_tokens`` exceed the window (the input alone fits)."""
    WINDOW_EXCEEDED = "model_context_window_exceeded"


@dataclass(frozen=True, slots=True)
class ContextError:
    kind: ContextErrorKind
    detail: str
    limit: int | None = None
    """The upstream's stated maximum (tokens), when it gave one."""
    prompt_tokens: int | None = None
    """The refused prompt's size as the upstream counted it, when it said."""
    max_tokens: int | None = None
    """The refused ``max_tokens`` (``context_overflow`` only)."""


_PROMPT_TOO_LONG = re.compile(r"prompt is too long(?::\s*(\d+)\s*tokens\s*>\s*(\d+)\s*maximum)?", re.I)
_OUTPUT_OVERFLOW = re.compile(
    r"input length and `?max_tokens`? exceed context limit(?::\s*(\d+)\s*\+\s*(\d+)\s*>\s*(\d+))?", re.I
)
_INPUT_TOO_LONG = re.compile(r"^\s*input is too long\b", re.I)
_VERTEX_SIZE = re.compile(r"^\s*the (request|message) size .*exceeds", re.I)


def classify(error: ApiErrorInfo) -> ContextError | None:
    """The context error ``error`` is, or ``None`` for any other failure."""
    detail = f"{error.error_type}: {error.message}"
    if error.status == 413 or error.error_type == "request_too_large":
        return ContextError(ContextErrorKind.REQUEST_TOO_LARGE, detail)
    if error.status not in (400, None):
        return None
    if error.error_type == "invalid_request_error":
        match = _PROMPT_TOO_LONG.search(error.message)
        if match is not None:
            prompt, limit = match.group(1), match.group(2)
            return ContextError(
                ContextErrorKind.PROMPT_TOO_LONG,
                detail,
                limit=int(limit) if limit else None,
                prompt_tokens=int(prompt) if prompt else None,
            )
        overflow = _OUTPUT_OVERFLOW.search(error.message)
        if overflow is not None:
            prompt, cap, limit = overflow.group(1), overflow.group(2), overflow.group(3)
            return ContextError(
                ContextErrorKind.OUTPUT_OVERFLOW,
                detail,
                limit=int(limit) if limit else None,
                prompt_tokens=int(prompt) if prompt else None,
                max_tokens=int(cap) if cap else None,
            )
    if _INPUT_TOO_LONG.search(error.message) or _VERTEX_SIZE.search(error.message):
        return ContextError(ContextErrorKind.INPUT_TOO_LONG, detail)
    return None
