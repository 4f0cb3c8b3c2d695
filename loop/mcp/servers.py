"""Connecting to MCP servers with the official ``mcp`` package: stdio and streamable HTTP.

::

    async with loop.mcp.connect(load_servers("mcp.json")) as tools:
        run = loop.query(loop.QueryParams("...", tools=[*builtin_tools(root), *tools]))
        await run.wait()

``connect`` starts every server (a stdio server as a child process; an HTTP server over one
session), lists its tools (every page) and yields them as loop tools; leaving the block closes the
sessions and stops the processes. A server that cannot be started or listed within its
``timeout`` raises ``McpServerError`` naming it (its headers and environment never appear in the
message). Tool calls run in the loop's tool tasks and share the server's session.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, TextIO

import httpx2
import mcp.types as mcp_types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from loop.tools.base import Tool

from .config import HttpServer, StdioServer
from .tools import McpTool

HTTP_TIMEOUT_S = 30.0
HTTP_READ_TIMEOUT_S = 300.0
"""A streamable HTTP server may hold a response stream open this long (the SDK's default)."""


class McpServerError(RuntimeError):
    """A server could not be started, initialised or listed."""


@asynccontextmanager
async def connect(
    servers: Mapping[str, StdioServer | HttpServer], *, errlog: TextIO | None = None
) -> AsyncIterator[list[Tool[Any]]]:
    """The tools of every server, for the duration of the block. ``errlog``: where stdio
    servers' stderr goes (default ``sys.stderr``)."""
    async with AsyncExitStack() as stack:
        tools: list[Tool[Any]] = []
        for name, server in servers.items():
            try:
                async with asyncio.timeout(server.timeout_s):
                    session = await _open(stack, server, _usable(errlog or sys.stderr))
                    listed = await _list_tools(session)
            except TimeoutError:
                raise McpServerError(f"MCP server {name!r}: no answer within {server.timeout_s:g}s") from None
            except Exception as exc:
                raise McpServerError(f"MCP server {name!r} failed to start: {_describe(exc)}") from exc
            tools.extend(McpTool(name, item, session, server.permission_of(item.name)) for item in listed)
        yield tools


async def _open(stack: AsyncExitStack, server: StdioServer | HttpServer, errlog: TextIO) -> ClientSession:
    if isinstance(server, StdioServer):
        params = StdioServerParameters(
            command=server.command, args=server.args, env=server.env or None, cwd=server.cwd
        )
        read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
    else:
        client = httpx2.AsyncClient(
            headers=server.headers, timeout=httpx2.Timeout(HTTP_TIMEOUT_S, read=HTTP_READ_TIMEOUT_S)
        )
        await stack.enter_async_context(client)
        read, write = await stack.enter_async_context(streamable_http_client(server.url, http_client=client))
    session = await stack.enter_async_context(ClientSession(read, write))
    await session.initialize()
    return session


async def _list_tools(session: ClientSession) -> list[mcp_types.Tool]:
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    while True:
        params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


def _usable(errlog: TextIO) -> TextIO:
    """``errlog`` if a child process can write to it (it has a file descriptor), else the
    process's own stderr (``sys.stderr`` may be a capture object, e.g. under pytest)."""
    try:
        errlog.fileno()
    except (AttributeError, OSError, ValueError):
        return sys.__stderr__ or errlog
    return errlog


def _describe(exc: BaseException) -> str:
    """An exception (or an exception group's first leaf) as ``Type: message``."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__
