"""Tools from MCP servers (the official ``mcp`` package): the servers file, the connections, the
tools (``mcp__<server>__<tool>``). Imported on demand: ``import loop`` does not load ``mcp``.

Public: ``__all__``; the modules inside are internal.
"""

from loop.mcp.config import HttpServer, McpConfigError, Permission, StdioServer, load_servers, parse_servers
from loop.mcp.servers import McpServerError, connect
from loop.mcp.tools import McpTool, tool_name

__all__ = [
    "HttpServer",
    "McpConfigError",
    "McpServerError",
    "McpTool",
    "Permission",
    "StdioServer",
    "connect",
    "load_servers",
    "parse_servers",
    "tool_name",
]
