"""The context window a Messages request is held to, and the first-party answer to a prompt that
does not fit it.

The window is the model's (``ModelSpec.context_window``), 1,000,000 tokens when the request
carries the ``context-1m-2025-08-07`` beta. The first-party API refuses a longer prompt with
``400 invalid_request_error`` ``prompt is too long: 210000 tokens > 200000 maximum``
(``../shared/design/providers.md`` section 5, the error table; the SDK raises ``BadRequestError``
and does not retry). Vertex relays model errors in that same Anthropic envelope (section 3,
"Model errors pass through in Anthropic shape"), and Foundry's body and errors are first-party
ones (section 4), so their apps share this check; Bedrock words it its own way (``Input is too
long.``, :mod:`.bedrock_body`). The prompt is counted with the emulator's token rule
(:mod:`.tokens`); ``count_tokens`` is not held to the window.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from .catalog import ModelSpec
from .errors import ApiError, invalid_request

CONTEXT_1M_BETA: Final = "context-1m-2025-08-07"
CONTEXT_1M: Final = 1_000_000


def context_window(spec: ModelSpec, betas: Iterable[str]) -> int:
    return CONTEXT_1M if CONTEXT_1M_BETA in betas else spec.context_window


def prompt_too_long(prompt_tokens: int, window: int) -> ApiError:
    return invalid_request(f"prompt is too long: {prompt_tokens} tokens > {window} maximum")


def check_window(prompt_tokens: int, spec: ModelSpec, betas: Iterable[str]) -> None:
    """Raise the first-party ``prompt is too long`` error when the prompt exceeds the window."""
    window = context_window(spec, betas)
    if prompt_tokens > window:
        raise prompt_too_long(prompt_tokens, window)
