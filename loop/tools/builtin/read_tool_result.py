"""``read_tool_result``: reads back a tool result the context layers shortened or cleared.

The loop adds it to every run whose context layers are on. Its own results are exempt from the
tool-result budget (``max_result_size_chars = None``): it returns at most ``limit`` characters
per call, so a long result is read in pieces.
"""

from __future__ import annotations

from pydantic import Field

from loop.context.session import ToolResultStore
from loop.tools.base import Tool, ToolContext, ToolError, ToolInput

NAME = "read_tool_result"
MAX_LIMIT = 20_000


class ReadToolResultInput(ToolInput):
    tool_use_id: str = Field(description="The id named in the shortened or cleared result")
    offset: int = Field(0, ge=0, description="First character to return (0-based)")
    limit: int = Field(MAX_LIMIT, ge=1, le=MAX_LIMIT, description="Characters to return")


class ReadToolResult(Tool[ReadToolResultInput]):
    name = NAME
    description = (
        "Read the whole text of an earlier tool result that was shortened or cleared to save "
        "context (the note in its place names the tool_use_id). Use offset/limit to page through it."
    )
    input_model = ReadToolResultInput
    read_only = True
    max_result_size_chars = None

    def __init__(self, store: ToolResultStore) -> None:
        self.store = store

    async def call(self, tool_input: ReadToolResultInput, context: ToolContext) -> str:
        item = self.store.get(tool_input.tool_use_id)
        if item is None:
            raise ToolError(f"no stored result for tool_use_id {tool_input.tool_use_id!r}")
        total = len(item.text)
        start = min(tool_input.offset, total)
        end = min(total, start + tool_input.limit)
        header = f"[{item.tool} result {item.tool_use_id}: characters {start}-{end} of {total}]"
        more = f"\n[{total - end} more characters: call again with offset={end}]" if end < total else ""
        return f"{header}\n{item.text[start:end]}{more}"
