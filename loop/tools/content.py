"""What a tool may return: text, images, or a list of content blocks, as ``tool_result`` accepts.

``to_content`` maps a tool's return value to a string or a list of blocks; a dict whose ``type``
the API does not accept in a tool result is sent as JSON text, never as a block (no forged calls),
and so is a block without the fields its type requires; empty text blocks are dropped (the API
refuses them, and the session would be stuck with one in its history).

Details: docs/internals/loop-tools.md
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import BaseModel

from loop.messages import Block

ToolResultContent = str | list[Block]
"""A ``tool_result``'s ``content``: text, or a list of content blocks."""

RESULT_BLOCK_TYPES = frozenset({"text", "image", "document", "search_result"})
"""The block types the Messages API accepts inside a ``tool_result``."""
IMAGE_MEDIA_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})


@dataclass(frozen=True, slots=True)
class Image:
    """Image bytes a tool returns (PNG, JPEG, GIF or WebP)."""

    data: bytes
    media_type: str = "image/png"

    def __post_init__(self) -> None:
        if self.media_type not in IMAGE_MEDIA_TYPES:
            raise ValueError(
                f"unsupported image media type {self.media_type!r}: one of {sorted(IMAGE_MEDIA_TYPES)}"
            )

    def block(self) -> Block:
        return image_block(base64.b64encode(self.data).decode("ascii"), self.media_type)


def text_block(text: str) -> Block:
    return {"type": "text", "text": text}


def image_block(base64_data: str, media_type: str) -> Block:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": base64_data}}


def _json_text(value: Any) -> str:
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    return orjson.dumps(value, default=_default).decode()


def _default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(f"a tool returned a {type(value).__name__}, which is not JSON")


def _is_block(value: Any) -> bool:
    return isinstance(value, dict) and value.get("type") in RESULT_BLOCK_TYPES


EMPTY_RESULT = "(empty)"
"""A result whose blocks were all empty text (the API refuses an empty text block)."""
_SOURCE_FIELDS = {
    "base64": ("media_type", "data"),
    "text": ("media_type", "data"),
    "url": ("url",),
    "file": ("file_id",),
}
_SOURCES = {"image": ("base64", "url", "file"), "document": ("base64", "text", "url", "file", "content")}


def _well_formed(block: Block) -> bool:
    """The fields the API requires of a block of this type are there, with the right types."""
    kind = block["type"]
    if kind == "text":
        return isinstance(block.get("text"), str)
    if kind == "search_result":
        content = block.get("content")
        return (
            isinstance(block.get("source"), str)
            and isinstance(block.get("title"), str)
            and isinstance(content, list)
            and all(_is_block(b) and b["type"] == "text" and _well_formed(b) and _nonempty(b) for b in content)
        )
    source = block.get("source")
    if not isinstance(source, dict) or source.get("type") not in _SOURCES[kind]:
        return False
    if source["type"] == "content":
        return isinstance(source.get("content"), str | list)
    if kind == "image" and source["type"] == "base64" and source.get("media_type") not in IMAGE_MEDIA_TYPES:
        return False
    return all(isinstance(source.get(field), str) and source[field] for field in _SOURCE_FIELDS[source["type"]])


def _nonempty(block: Block) -> bool:
    return block["type"] != "text" or bool(str(block["text"]).strip())


def _block(item: Any) -> Block:
    if isinstance(item, str):
        return text_block(item)
    if isinstance(item, Image):
        return item.block()
    if _is_block(item) and _well_formed(item):
        return dict(item)
    return text_block(_json_text(item))


def checked_blocks(items: Sequence[Any]) -> ToolResultContent:
    """``items`` as ``tool_result`` blocks: a block missing what its type requires becomes its JSON
    as text, empty text blocks are dropped (``EMPTY_RESULT`` if nothing is left)."""
    blocks = [block for block in map(_block, items) if _nonempty(block)]
    return blocks or EMPTY_RESULT


def to_content(value: Any) -> ToolResultContent:
    """A tool's return value as ``tool_result`` content (``TypeError`` when it is not JSON)."""
    if isinstance(value, str):
        return value
    if isinstance(value, Image) or _is_block(value):
        return checked_blocks([value])
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray) and value:
        items = list(value)
        if any(isinstance(i, str | Image) or _is_block(i) for i in items):
            return checked_blocks(items)
    return _json_text(value)


def content_text(content: ToolResultContent) -> str:
    """The text of a result (its text blocks joined), for logs and truncation."""
    if isinstance(content, str):
        return content
    return "\n".join(str(b.get("text", "")) for b in content if b.get("type") == "text")
