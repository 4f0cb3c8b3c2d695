"""Deterministic token counting.

The rule (documented in ``README.md``):

* ``text_tokens(s) = ceil(len(s.encode("utf-8")) / 4)``: four UTF-8 bytes per token, rounded up.
* A content block costs ``BLOCK_OVERHEAD`` plus its payload: the text of ``text`` blocks, the
  thinking text of ``thinking`` blocks, name + compact key-sorted JSON input of ``tool_use``,
  the nested content of ``tool_result`` (a string, or blocks counted recursively), a fixed
  ``IMAGE_TOKENS`` per image, a text document's text or a fixed ``DOCUMENT_TOKENS`` otherwise,
  and the canonical JSON (minus ``type``) of any other block type.
* A tool definition costs ``TOOL_OVERHEAD`` plus the canonical JSON of the whole definition.
* Each message adds ``MESSAGE_OVERHEAD`` (attributed to its first block); each request adds
  ``REQUEST_OVERHEAD`` (never cacheable, so a fully cached prompt still reports a few input
  tokens, as the real API does).
* ``cache_control`` keys never count.
* Output tokens are ``text_tokens`` of what was generated: text, thinking text and the
  ``input_json_delta`` JSON of tool calls (no per-block overhead).

Every count is an ``int`` and depends only on the request content, so ``count_tokens`` equals
``input_tokens + cache_creation_input_tokens + cache_read_input_tokens`` for the same request.
"""

from __future__ import annotations

from typing import Any

from .json_types import JSONObject, canonical_json, without_cache_control

BYTES_PER_TOKEN = 4
BLOCK_OVERHEAD = 3
MESSAGE_OVERHEAD = 4
TOOL_OVERHEAD = 8
REQUEST_OVERHEAD = 3
IMAGE_TOKENS = 1_600
DOCUMENT_TOKENS = 1_600


def bytes_tokens(size: int) -> int:
    """Tokens for ``size`` UTF-8 bytes."""
    return -(-size // BYTES_PER_TOKEN)


def text_tokens(text: str) -> int:
    """``ceil(utf8 bytes / 4)``."""
    return bytes_tokens(len(text.encode("utf-8")))


def json_tokens(value: object) -> int:
    """Tokens of the canonical (compact, key-sorted) JSON of ``value`` without ``cache_control``."""
    return bytes_tokens(len(canonical_json(without_cache_control(value))))


def _nested_tokens(content: Any) -> int:
    if content is None:
        return 0
    if isinstance(content, str):
        return text_tokens(content)
    if isinstance(content, list):
        return sum(content_block_tokens(b) if isinstance(b, dict) else json_tokens(b) for b in content)
    return json_tokens(content)


def payload_tokens(block: JSONObject) -> int:
    """Tokens of a content block's payload, without the per-block overhead."""
    kind = block.get("type")
    if kind == "text":
        return text_tokens(str(block.get("text", "")))
    if kind == "thinking":
        return text_tokens(str(block.get("thinking", "")))
    if kind == "redacted_thinking":
        return text_tokens(str(block.get("data", "")))
    if kind in ("tool_use", "server_tool_use", "mcp_tool_use"):
        return text_tokens(str(block.get("name", ""))) + json_tokens(block.get("input", {}))
    if kind == "tool_result":
        return _nested_tokens(block.get("content"))
    if kind == "image":
        return IMAGE_TOKENS
    if kind == "document":
        source = block.get("source")
        if isinstance(source, dict):
            if source.get("type") == "text":
                return text_tokens(str(source.get("data", "")))
            if source.get("type") == "content":
                return _nested_tokens(source.get("content"))
        return DOCUMENT_TOKENS
    return json_tokens({k: v for k, v in block.items() if k != "type"})


def content_block_tokens(block: JSONObject) -> int:
    """Tokens of one content block of a prompt (overhead + payload)."""
    return BLOCK_OVERHEAD + payload_tokens(block)


def tool_tokens(tool: JSONObject) -> int:
    """Tokens of one tool definition."""
    return TOOL_OVERHEAD + json_tokens(tool)
