"""One Claude Code turn sent through the official SDK, streamed, as the CLI sends it (the benches
that replay captured sessions share it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import anthropic

from bench.cc_session import ClaudeCodeSession


async def stream_turn(
    client: anthropic.AsyncAnthropic,
    session: ClaudeCodeSession,
    model: str,
    headers: dict[str, str],
    *,
    query: Mapping[str, str] | None = None,
) -> tuple[anthropic.types.Message, Mapping[str, str]]:
    """The session's next request for ``model``: the final message and the response headers."""
    request = session.next_request(model)
    other = session.other_fields
    max_tokens = int(other.pop("max_tokens"))
    metadata = other.pop("metadata", None)
    other.pop("stream", None)
    async with client.messages.stream(
        model=request["model"],
        max_tokens=max_tokens,
        messages=cast(Any, request["messages"]),
        system=cast(Any, request["system"]),
        tools=cast(Any, request["tools"]),
        metadata=cast(Any, metadata) if metadata is not None else anthropic.omit,
        extra_body=other,
        extra_headers=headers,
        extra_query=dict(query) if query else None,
    ) as stream:
        message = await stream.get_final_message()
        return message, stream.response.headers
