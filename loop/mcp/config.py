"""The MCP servers file: the ``{"mcpServers": {...}}`` JSON Claude Code and claude-agent-sdk read.

Variables expand as Claude Code expands them; an unset ``${VAR}`` without a default makes the file
invalid and errors never show a value. Servers' own annotations are not trusted: tools are
``destructive`` unless declared otherwise. Format and keys: the design document.

Details: docs/internals/loop-mcp.md
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from .oauth import OAuthSettings

SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
"""``${NAME}`` or ``${NAME:-default}`` (Claude Code's pattern)."""


class Permission(enum.StrEnum):
    READ_ONLY = "readOnly"
    EDIT = "edit"
    DESTRUCTIVE = "destructive"


class _Server(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    permission: Permission = Permission.DESTRUCTIVE
    tool_permissions: dict[str, Permission] = Field(default_factory=dict, alias="toolPermissions")
    timeout_s: float = Field(default=30.0, gt=0, alias="timeout")
    """Seconds to start the server and list its tools."""

    def permission_of(self, tool: str) -> Permission:
        return self.tool_permissions.get(tool, self.permission)


class StdioServer(_Server):
    type: Literal["stdio"] = "stdio"
    command: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None


class HttpServer(_Server):
    type: Literal["http", "streamable-http", "streamableHttp"]
    url: str = Field(pattern=r"^https?://")
    headers: dict[str, str] = Field(default_factory=dict)
    oauth: OAuthSettings | None = None
    """The client-credentials grant (:mod:`loop.mcp.oauth`)."""


ServerConfig = Annotated[StdioServer | HttpServer, Field(discriminator="type")]
_SERVER: TypeAdapter[StdioServer | HttpServer] = TypeAdapter(ServerConfig)


class McpConfigError(ValueError):
    """The MCP servers file is unreadable or invalid (the message names the server and field)."""


def expand(value: str, environ: Mapping[str, str]) -> tuple[str, list[str]]:
    """``value`` with its ``${VAR}`` / ``${VAR:-default}`` references expanded, and the names of
    the unset variables that had no default (left as written)."""
    missing: list[str] = []

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in environ:
            return environ[name]
        if default is not None:
            return default
        missing.append(name)
        return match.group(0)

    return VARIABLE.sub(substitute, value), missing


def _expanded(name: str, entry: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """``entry`` with the variables of its expandable fields expanded (``McpConfigError`` for an
    unset one without a default)."""
    missing: list[str] = []

    def one(field: str, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        text, unset = expand(value, environ)
        missing.extend(f"{field}: ${{{variable}}}" for variable in unset)
        return text

    result = dict(entry)
    for key in ("command", "url"):
        if key in result:
            result[key] = one(key, result[key])
    if isinstance(result.get("args"), list):
        result["args"] = [one(f"args[{i}]", a) for i, a in enumerate(result["args"])]
    for key in ("env", "headers"):
        if isinstance(result.get(key), dict):
            result[key] = {k: one(f"{key}.{k}", v) for k, v in result[key].items()}
    oauth = result.get("oauth")
    if isinstance(oauth, dict):  # switchyard's own: the client credentials come from the environment
        result["oauth"] = {
            k: one(f"oauth.{k}", v) if k in ("clientId", "clientSecret") else v for k, v in oauth.items()
        }
    if missing:
        raise McpConfigError(
            f"server {name!r}: environment variables not set (and no ${{VAR:-default}}): {', '.join(missing)}"
        )
    return result


def parse_servers(data: Any, environ: Mapping[str, str] | None = None) -> dict[str, StdioServer | HttpServer]:
    """The servers of an ``{"mcpServers": {...}}`` value, in file order; ``${VAR}`` references
    expanded from ``environ`` (default: the process environment)."""
    environ = os.environ if environ is None else environ
    if not isinstance(data, dict) or not isinstance(data.get("mcpServers"), dict):
        raise McpConfigError('expected a JSON object {"mcpServers": {name: server, ...}}')
    servers: dict[str, StdioServer | HttpServer] = {}
    for name, raw in data["mcpServers"].items():
        if not SERVER_NAME.match(name):
            raise McpConfigError(f"server name {name!r}: use 1-64 letters, digits, '_' or '-'")
        if not isinstance(raw, dict):
            raise McpConfigError(f"server {name!r}: expected an object")
        entry = _expanded(name, dict(raw), environ)
        if entry.get("type") == "sse":
            raise McpConfigError(
                f"server {name!r}: the SSE transport is deprecated and not supported; use http"
            )
        entry.setdefault("type", "stdio")
        try:
            servers[name] = _SERVER.validate_python(entry)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'][1:]) or 'server'}: {e['msg']}"
                for e in exc.errors(include_url=False)
            )
            raise McpConfigError(f"server {name!r}: {problems}") from None
    return servers


def load_configs(
    values: list[str], environ: Mapping[str, str] | None = None
) -> dict[str, StdioServer | HttpServer]:
    """Servers from several files or JSON strings (Claude Code's ``--mcp-config <configs...>``),
    in order; a server name defined twice is an error."""
    servers: dict[str, StdioServer | HttpServer] = {}
    for value in values:
        if value.lstrip().startswith("{"):
            try:
                loaded = parse_servers(orjson.loads(value), environ)
            except orjson.JSONDecodeError as exc:
                raise McpConfigError(f"the JSON given is not valid: {exc}") from None
        else:
            loaded = load_servers(value, environ)
        twice = sorted(set(servers) & set(loaded))
        if twice:
            raise McpConfigError(f"server {twice[0]!r} is defined twice")
        servers.update(loaded)
    return servers


def load_servers(
    path: str | os.PathLike[str], environ: Mapping[str, str] | None = None
) -> dict[str, StdioServer | HttpServer]:
    try:
        data = orjson.loads(Path(path).read_bytes())
    except OSError as exc:
        raise McpConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except orjson.JSONDecodeError as exc:
        raise McpConfigError(f"{path} is not JSON: {exc}") from None
    return parse_servers(data, environ)
