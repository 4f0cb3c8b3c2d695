"""MCP resources as two read-only tools, and MCP prompts as messages.

The tools are named and shaped as Claude Code's (2.1.332): ``ListMcpResourcesTool`` (input:
optional ``server``; answers a JSON list of ``{"uri", "name", "mimeType", "description",
"server"}``, every page of ``resources/list``) and ``ReadMcpResourceTool`` (input: ``server``,
``uri``; ``resources/read``: text contents as text, images as ``image`` blocks, other binary
contents described in a line of text). ``connect`` adds them when a connected server declares the
``resources`` capability. A prompt (``prompts/get``) becomes user/assistant messages, its content
mapped as tool results are (:mod:`loop.mcp.tools`).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import mcp.types as mcp_types
import orjson
from mcp import ClientSession
from pydantic import Field

from loop.messages import Block, Message
from loop.tools.base import Tool, ToolContext, ToolError, ToolInput
from loop.tools.content import IMAGE_MEDIA_TYPES, ToolResultContent, image_block, text_block

from .tools import content_blocks

LIST_NAME = "ListMcpResourcesTool"
READ_NAME = "ReadMcpResourceTool"


class ListInput(ToolInput):
    server: str | None = Field(None, description="Optional server name to filter resources by")


class ReadInput(ToolInput):
    server: str = Field(description="The MCP server name")
    uri: str = Field(description="The resource URI to read")


class _ResourceTool:
    def __init__(self, sessions: Mapping[str, ClientSession]) -> None:
        self._sessions = dict(sessions)

    def _session(self, server: str) -> ClientSession:
        session = self._sessions.get(server)
        if session is None:
            known = ", ".join(self._sessions) or "(none)"
            raise ToolError(f"no MCP server {server!r} with resources; servers with resources: {known}")
        return session


class ListMcpResources(_ResourceTool, Tool[ListInput]):
    name = LIST_NAME
    description = (
        "List available resources from configured MCP servers. Each resource has a server, a uri "
        "(read it with ReadMcpResourceTool), a name, and optionally a mimeType and a description."
    )
    input_model = ListInput
    read_only = True

    async def call(self, tool_input: ListInput, context: ToolContext) -> ToolResultContent:
        servers = [tool_input.server] if tool_input.server is not None else list(self._sessions)
        listed: list[dict[str, Any]] = []
        for server in servers:
            session = self._session(server)
            cursor: str | None = None
            while True:
                params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
                page = await session.list_resources(params=params)
                listed.extend(_resource(server, item) for item in page.resources)
                cursor = page.next_cursor
                if not cursor:
                    break
        return orjson.dumps(listed).decode()


class ReadMcpResource(_ResourceTool, Tool[ReadInput]):
    name = READ_NAME
    description = "Reads a specific resource from an MCP server, identified by server name and resource URI."
    input_model = ReadInput
    read_only = True

    async def call(self, tool_input: ReadInput, context: ToolContext) -> ToolResultContent:
        result = await self._session(tool_input.server).read_resource(tool_input.uri)
        if not isinstance(result, mcp_types.ReadResourceResult):
            raise ToolError(
                f"the MCP server {tool_input.server!r} asked for more input to read {tool_input.uri}"
            )
        blocks = [_contents(item) for item in result.contents]
        if all(b["type"] == "text" for b in blocks):
            return "\n".join(str(b["text"]) for b in blocks)
        return blocks


def _resource(server: str, item: mcp_types.Resource) -> dict[str, Any]:
    entry: dict[str, Any] = {"uri": str(item.uri), "name": item.name}
    if item.mime_type:
        entry["mimeType"] = item.mime_type
    if item.description:
        entry["description"] = item.description
    entry["server"] = server
    return entry


def _contents(item: mcp_types.TextResourceContents | mcp_types.BlobResourceContents) -> Block:
    if isinstance(item, mcp_types.TextResourceContents):
        return text_block(item.text)
    mime = item.mime_type or "application/octet-stream"
    if mime in IMAGE_MEDIA_TYPES:
        return image_block(item.blob, mime)
    size = len(base64.b64decode(item.blob, validate=False))
    return text_block(f"[binary resource {item.uri}: {mime}, {size} bytes]")


def prompt_messages(result: mcp_types.GetPromptResult) -> list[Message]:
    """A prompt's messages, consecutive ones of the same role merged."""
    messages: list[Message] = []
    for item in result.messages:
        blocks = content_blocks(item.content)
        if messages and messages[-1]["role"] == item.role:
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": item.role, "content": list(blocks)})
    return messages
