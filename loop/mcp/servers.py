"""Connecting to MCP servers with the official ``mcp`` package: stdio and streamable HTTP.

A server that fails to start or list does not fail the others (unless ``strict=True``); its
headers and environment never appear in a message. Leaving ``connect`` stops every server.

Details: docs/internals/loop-mcp.md
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any, TextIO

import httpx2
import mcp.types as mcp_types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from loop.messages import Message
from loop.tools.base import Tool

from .config import HttpServer, StdioServer
from .oauth import client_credentials
from .resources import ListMcpResources, ReadMcpResource, prompt_messages
from .tools import McpTool, unique_names

log = logging.getLogger("switchyard.loop.mcp")

HTTP_TIMEOUT_S = 30.0
HTTP_READ_TIMEOUT_S = 300.0
"""A streamable HTTP server may hold a response stream open this long (the SDK's default)."""


class McpServerError(RuntimeError):
    """A server could not be started, initialised or listed."""


@dataclass(frozen=True, slots=True)
class ServerFailure:
    server: str
    message: str
    """What went wrong (``MCP server 'x' failed to start: ...``), without headers or environment."""


class McpTools(list[Tool[Any]]):
    """The tools of the connected servers (a list), what failed, and the servers' prompts."""

    def __init__(self) -> None:
        super().__init__()
        self.failures: list[ServerFailure] = []
        self.sessions: dict[str, ClientSession] = {}
        """The connected servers' sessions, by name."""

    async def prompt(
        self, server: str, name: str, arguments: Mapping[str, str] | None = None
    ) -> list[Message]:
        """The messages of a server's prompt (``prompts/get``), ready for ``QueryParams.messages``."""
        session = self.sessions.get(server)
        if session is None:
            raise KeyError(f"no connected MCP server {server!r}")
        result = await session.get_prompt(name, dict(arguments) if arguments else None)
        if not isinstance(result, mcp_types.GetPromptResult):
            raise McpServerError(f"MCP server {server!r}: the prompt {name!r} asked for more input")
        return prompt_messages(result)


@asynccontextmanager
async def connect(
    servers: Mapping[str, StdioServer | HttpServer],
    *,
    errlog: TextIO | None = None,
    strict: bool = False,
    on_failure: Callable[[ServerFailure], None] | None = None,
) -> AsyncIterator[McpTools]:
    """The tools of every server that connected, for the duration of the block. ``errlog``: where
    stdio servers' stderr goes (default ``sys.stderr``). A server that fails is reported to
    ``on_failure`` and in ``failures`` (``strict``: ``McpServerError`` instead)."""
    async with AsyncExitStack() as stack:
        tools = McpTools()
        with_resources: dict[str, ClientSession] = {}
        for name, server in servers.items():
            own = AsyncExitStack()  # closed at once if this server fails, else with the others
            try:
                async with asyncio.timeout(server.timeout_s):
                    session = await _open(own, server, _usable(errlog or sys.stderr))
                    listed = await _list_tools(session)
            except BaseException as exc:
                cause = await _closed_after(own, exc)
                failure = ServerFailure(name, _failure_message(name, server, cause))
                if strict:
                    raise McpServerError(failure.message) from cause
                log.warning("%s; its tools are not available", failure.message)
                tools.failures.append(failure)
                if on_failure is not None:
                    on_failure(failure)
                continue
            stack.push_async_exit(own)
            tools.sessions[name] = session
            tools.extend(McpTool(name, item, session, server.permission_of(item.name)) for item in listed)
            capabilities = session.server_capabilities
            if capabilities is not None and capabilities.resources is not None:
                with_resources[name] = session
        unique_names([t for t in tools if isinstance(t, McpTool)])
        if with_resources:
            tools.extend([ListMcpResources(with_resources), ReadMcpResource(with_resources)])
        yield tools


async def _closed_after(own: AsyncExitStack, exc: BaseException) -> Exception:
    """Close a failed server's contexts; what went wrong. The transport's task group may have
    cancelled the start-up because one of its tasks failed (an OAuth error, a dead process): the
    ``CancelledError`` seen first is then replaced by that task's exception, which closing the
    group raises. A cancellation from outside (nothing failed inside) is raised again."""
    try:
        await own.aclose()
    except Exception as closing:
        return exc if isinstance(exc, Exception) else closing
    if isinstance(exc, Exception):
        return exc
    raise exc


def _failure_message(name: str, server: StdioServer | HttpServer, exc: Exception) -> str:
    if isinstance(exc, TimeoutError):
        return f"MCP server {name!r}: no answer within {server.timeout_s:g}s"
    return f"MCP server {name!r} failed to start: {_describe(exc)}"


async def _open(stack: AsyncExitStack, server: StdioServer | HttpServer, errlog: TextIO) -> ClientSession:
    if isinstance(server, StdioServer):
        params = StdioServerParameters(
            command=server.command, args=server.args, env=server.env or None, cwd=server.cwd
        )
        read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
    else:
        client = httpx2.AsyncClient(
            headers=server.headers,
            timeout=httpx2.Timeout(HTTP_TIMEOUT_S, read=HTTP_READ_TIMEOUT_S),
            auth=client_credentials(server.url, server.oauth) if server.oauth is not None else None,
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
