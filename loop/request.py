"""The Messages API request of one iteration, built from the history and the config snapshot.

With ``prompt_caching`` the request carries two breakpoints, as Claude Code places them: the end of
the system prompt (tools and system are the stable prefix) and the newest message's last block
(so each turn reads the previous turn's prefix from the cache). Markers are added to copies:
the stored history never carries them. The context layers may lower the output cap and the
thinking budget (after a context overflow) and add server-side context edits (with their beta).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from loop.config import LoopConfig
from loop.messages import Block, JSONObject, Message, blocks_of

SystemPrompt = str | Sequence[Block] | None

EPHEMERAL: JSONObject = {"type": "ephemeral"}
_NOT_CACHEABLE = frozenset({"thinking", "redacted_thinking"})


@dataclass(frozen=True, slots=True)
class ModelRequest:
    body: JSONObject
    """The ``POST /v1/messages`` body (``"stream": true``)."""
    betas: tuple[str, ...]
    """Sent as the ``anthropic-beta`` header."""
    request_id: str
    source: str = "sdk"
    """Who asked: the run's ``LoopConfig.source``, ``compact`` for a summarisation call, ``hook``
    for a prompt hook's judge."""


def build_request(
    messages: Sequence[Message],
    config: LoopConfig,
    *,
    system: SystemPrompt,
    tools: Sequence[JSONObject],
    max_tokens: int,
    request_id: str,
    thinking_budget: int | None = None,
    context_management: JSONObject | None = None,
    extra_betas: Sequence[str] = (),
    task_budget: JSONObject | None = None,
    model: str | None = None,
) -> ModelRequest:
    """``thinking_budget`` enables extended thinking (the caller passes the config's, or the
    downgraded one); ``task_budget`` is sent as ``output_config.task_budget``; ``model`` overrides
    ``config.model`` (after a sticky fallback)."""
    body: JSONObject = {"model": model or config.model, "max_tokens": max_tokens}
    blocks = system_blocks(system, cache=config.prompt_caching)
    if blocks:
        body["system"] = blocks
    body["messages"] = _with_message_breakpoint(messages) if config.prompt_caching else list(messages)
    if tools:
        body["tools"] = list(tools)
    if thinking_budget is not None:
        body["thinking"] = {"type": "enabled", "budget_tokens": thinking_budget}
    if config.stop_sequences:
        body["stop_sequences"] = list(config.stop_sequences)
    if config.temperature is not None:
        body["temperature"] = config.temperature
    if context_management is not None:
        body["context_management"] = context_management
    if task_budget is not None:
        body["output_config"] = {**body.get("output_config", {}), "task_budget": task_budget}
    body["stream"] = True
    betas = (*config.betas, *(b for b in extra_betas if b not in config.betas))
    return ModelRequest(body=body, betas=betas, request_id=request_id, source=config.source)


def summary_request(
    config: LoopConfig,
    *,
    system: str,
    messages: Sequence[Message],
    max_tokens: int,
    request_id: str,
    model: str | None = None,
) -> ModelRequest:
    """The summarisation side call: the run's model (``model``, else ``config.model``), no tools, no
    thinking, ``source="compact"``."""
    body: JSONObject = {
        "model": model or config.model,
        "max_tokens": max_tokens,
        "system": [{"type": "text", "text": system}],
        "messages": list(messages),
        "stream": True,
    }
    return ModelRequest(body=body, betas=config.betas, request_id=request_id, source="compact")


def system_blocks(system: SystemPrompt, *, cache: bool) -> list[Block]:
    if system is None or system == "":
        return []
    blocks: list[Block] = (
        [{"type": "text", "text": system}] if isinstance(system, str) else [dict(b) for b in system]
    )
    if cache and blocks and not any("cache_control" in b for b in blocks):
        blocks[-1] = {**blocks[-1], "cache_control": EPHEMERAL}
    return blocks


def _with_message_breakpoint(messages: Sequence[Message]) -> list[Message]:
    out = list(messages)
    if not out or any("cache_control" in b for m in out for b in blocks_of(m)):
        return out  # the caller placed its own breakpoints
    last = out[-1]
    blocks = blocks_of(last)
    for position in range(len(blocks) - 1, -1, -1):
        if blocks[position].get("type") not in _NOT_CACHEABLE:
            blocks[position] = {**blocks[position], "cache_control": EPHEMERAL}
            out[-1] = {**last, "content": blocks}
            break
    return out
