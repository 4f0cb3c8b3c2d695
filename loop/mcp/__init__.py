"""Tools from MCP servers (the official ``mcp`` package): the servers file, the connections, the
tools (``mcp__<server>__<tool>``), resources and prompts. Imported on demand: ``import loop`` does not load ``mcp``.

Public: ``__all__``; the modules inside are internal.
"""

from loop.mcp.config import (
    HttpServer,
    McpConfigError,
    Permission,
    StdioServer,
    load_configs,
    load_servers,
    parse_servers,
)
from loop.mcp.resources import ListMcpResources, ReadMcpResource
from loop.mcp.servers import McpServerError, McpTools, ServerFailure, connect
from loop.mcp.tools import McpTool, tool_name

__all__ = [
    "HttpServer",
    "ListMcpResources",
    "McpConfigError",
    "McpServerError",
    "McpTool",
    "McpTools",
    "Permission",
    "ReadMcpResource",
    "ServerFailure",
    "StdioServer",
    "connect",
    "load_configs",
    "load_servers",
    "parse_servers",
    "tool_name",
]
