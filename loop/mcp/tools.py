"""MCP tools as loop tools: ``mcp__<server>__<tool>``, called through the server's session.

The tool's input schema is the server's, as it listed it; the server validates the arguments (an
invalid call comes back as an error result the model can correct). A result's content blocks map
to ``tool_result`` content: text as text, images as base64 ``image`` blocks, embedded text
resources as text; what the Messages API cannot take in a tool result (audio, binary resources,
resource links) is described in a line of text. A result with only ``structured_content`` is
sent as its JSON. ``is_error`` results are error results.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Sequence
from typing import Any

import mcp.types as mcp_types
import orjson
from mcp import ClientSession
from pydantic import BaseModel, ConfigDict

from loop.messages import Block, JSONObject
from loop.tools.base import Tool, ToolContext, ToolError
from loop.tools.content import (
    IMAGE_MEDIA_TYPES,
    ToolResultContent,
    checked_blocks,
    content_text,
    image_block,
    text_block,
)

from .config import Permission

log = logging.getLogger("switchyard.loop.mcp")

MAX_NAME = 64
"""The longest tool name the Messages API and Claude Code accept."""
_INVALID = re.compile(r"[^A-Za-z0-9_-]")


def tool_name(server: str, tool: str) -> str:
    """``mcp__<server>__<tool>``, characters the API refuses replaced by ``_``; a longer name is
    cut and made unique with a hash of the full one (names that still clash: ``unique_names``)."""
    name = _INVALID.sub("_", f"mcp__{server}__{tool}")
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: MAX_NAME - 9]}_{digest}"


def unique_names(tools: Sequence[McpTool]) -> None:
    """Rename the tools whose names clash (``get.item`` and ``get_item`` are both
    ``mcp__s__get_item``; so are server ``a.b``'s ``x`` and server ``a_b``'s): a name sanitising
    left as it was is kept, every other one of the clash gets a hash of its server and remote name
    (deterministic: the same tools always get the same names)."""
    groups: dict[str, list[McpTool]] = {}
    for tool in tools:
        groups.setdefault(tool.name, []).append(tool)
    taken = set(groups)
    for name, group in groups.items():
        if len(group) < 2:
            continue
        exact = [t for t in group if name == f"mcp__{t.server}__{t.remote_name}"]
        for tool in group:
            if len(exact) == 1 and tool is exact[0]:
                continue
            tool.name = _suffixed(name, f"{tool.server}\0{tool.remote_name}", taken)
            taken.add(tool.name)
            log.warning(
                "MCP tool %r of server %r is named %s: %s is another tool's",
                tool.remote_name,
                tool.server,
                tool.name,
                name,
            )


def _suffixed(name: str, identity: str, taken: set[str]) -> str:
    digest = hashlib.sha256(identity.encode()).hexdigest()
    for width in range(8, len(digest) + 1):
        candidate = f"{name[: MAX_NAME - width - 1]}_{digest[:width]}"
        if candidate not in taken:
            return candidate
    raise ValueError(f"no unique name for the MCP tool {identity!r}")  # pragma: no cover


class McpInput(BaseModel):
    """Any JSON object: the server owns the schema and validates the arguments itself."""

    model_config = ConfigDict(extra="allow", frozen=True)


class McpTool(Tool[McpInput]):
    input_model = McpInput

    def __init__(
        self,
        server: str,
        listed: mcp_types.Tool,
        session: ClientSession,
        permission: Permission,
        *,
        timeout_s: float | None = None,
    ) -> None:
        self.server = server
        self.remote_name = listed.name
        self.name = tool_name(server, listed.name)
        self.description = listed.description or listed.title or listed.name
        self._schema: JSONObject = dict(listed.input_schema) or {"type": "object"}
        self._session = session
        self.permission = permission
        self.read_only = permission is Permission.READ_ONLY
        self.destructive = permission is Permission.DESTRUCTIVE
        self.timeout_s = timeout_s

    def input_schema(self) -> JSONObject:
        return self._schema

    async def call(self, tool_input: McpInput, context: ToolContext) -> ToolResultContent:
        arguments: dict[str, Any] = dict(tool_input.model_extra or {})
        result = await self._session.call_tool(self.remote_name, arguments)
        content = result_content(result)
        if result.is_error:
            raise ToolError(content_text(content) or f"{self.name} failed")
        return content


def result_content(result: mcp_types.CallToolResult) -> ToolResultContent:
    blocks = [block for item in result.content for block in content_blocks(item)]
    if not blocks and result.structured_content is not None:
        return orjson.dumps(result.structured_content).decode()
    if all(b["type"] == "text" for b in blocks):
        return "\n".join(str(b["text"]) for b in blocks)
    return checked_blocks(blocks)


def content_blocks(item: mcp_types.ContentBlock) -> list[Block]:
    """One MCP content item as the ``tool_result`` / message blocks the Messages API takes."""
    match item:
        case mcp_types.TextContent(text=text):
            return [text_block(text)]
        case mcp_types.ImageContent(data=data, mime_type=mime) if mime in IMAGE_MEDIA_TYPES:
            return [image_block(data, mime)]
        case mcp_types.ImageContent(mime_type=mime):
            return [text_block(f"[image omitted: {mime} is not a type the model accepts]")]
        case mcp_types.AudioContent(mime_type=mime, data=data):
            return [text_block(f"[audio omitted: {mime}, {len(data) * 3 // 4} bytes]")]
        case mcp_types.ResourceLink(uri=uri, name=name):
            return [text_block(f"[resource link: {name} {uri}]")]
        case mcp_types.EmbeddedResource(resource=mcp_types.TextResourceContents(text=text)):
            return [text_block(text)]
        case mcp_types.EmbeddedResource(resource=mcp_types.BlobResourceContents(blob=blob) as resource):
            mime = resource.mime_type or "application/octet-stream"
            if mime in IMAGE_MEDIA_TYPES:
                return [image_block(blob, mime)]
            return [text_block(f"[resource omitted: {resource.uri} ({mime})]")]
    return [text_block(f"[unsupported MCP content: {type(item).__name__}]")]
