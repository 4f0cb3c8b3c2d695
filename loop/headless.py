"""``switchyard agent``'s headless options: ``--allow``, ``--yes``, ``--mcp-config``.

A run is interactive when stdin is a terminal and ``--json`` is off: a call the permission mode
does not allow outright is asked at the terminal. Otherwise nobody can answer, so such a call is
refused, and the run ends at once with the terminal ``permission_denied`` and exit code
``EXIT_PERMISSION_DENIED`` (a headless run never silently goes on without the edit it was asked
to make). ``--allow TOOL`` (repeatable; ``mcp__<server>`` allows every tool of that server)
allows a tool without asking; ``--yes`` answers yes to every question. Deny rules and ``plan``
mode still refuse.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from loop.tools.base import Tool
from loop.tools.permissions import (
    PermissionCallback,
    PermissionMode,
    PermissionPolicy,
    PermissionRequest,
    PermissionRule,
    PermissionVerdict,
)

EXIT_PERMISSION_DENIED = 3

EPILOG = f"""\
permissions:
  State-changing tool calls the --permission-mode does not allow outright (in acceptEdits: the
  destructive ones, e.g. write_file overwriting a file; MCP tools unless their server's
  "permission" says otherwise) are asked at the terminal. When nobody can answer (stdin is not a
  terminal, or --json), such a call is refused and the run stops with the terminal
  "permission_denied" and exit code {EXIT_PERMISSION_DENIED}. Use --allow TOOL (repeatable) or --yes
  to let a headless run make them.

exit codes:
  0 completed; 1 stopped for another reason (the terminal is printed); 2 usage or configuration
  error; {EXIT_PERMISSION_DENIED} a tool call was refused in a non-interactive run; 130 interrupted.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="TOOL",
        help="allow this tool without asking (repeatable; mcp__SERVER allows every tool of that MCP server)",
    )
    parser.add_argument(
        "--yes",
        action="store_true",
        help="answer yes to every permission question (deny rules and plan mode still refuse)",
    )
    parser.add_argument(
        "--mcp-config",
        action="append",
        default=[],
        metavar="FILE",
        help=(
            'MCP servers to use, in the {"mcpServers": {...}} JSON Claude Code reads: a file or the JSON '
            "itself, repeatable (stdio and http servers; tools are named mcp__SERVER__TOOL; ${VAR} and "
            "${VAR:-default} are expanded in command, args, env, url and headers; a server that fails to "
            "start is reported on stderr and the run goes on without its tools; servers with resources add "
            "ListMcpResourcesTool and ReadMcpResourceTool; an http server's "
            '"oauth": {"clientId", "clientSecret", "issuer"} uses the client-credentials grant)'
        ),
    )


def allow_rules(names: Sequence[str], tools: Sequence[Tool[Any]]) -> tuple[PermissionRule, ...]:
    """One rule per allowed tool; ``mcp__<server>`` stands for every tool of that server."""
    rules: list[PermissionRule] = []
    for name in names:
        if name.startswith("mcp__") and "__" not in name[len("mcp__") :]:
            prefix = f"{name}__"
            rules.extend(PermissionRule(tool=t.name) for t in tools if t.name.startswith(prefix))
        else:
            rules.append(PermissionRule(tool=name))
    return tuple(rules)


def permissions(
    mode: str, allow: Sequence[str], tools: Sequence[Tool[Any]], *, yes: bool, interactive: bool,
    ask: PermissionCallback,
) -> tuple[PermissionPolicy, PermissionCallback]:  # fmt: skip
    """The run's policy and who answers its questions: ``--yes``, the terminal, or a refusal that
    ends the run."""
    policy = PermissionPolicy(mode=PermissionMode(mode), allow=allow_rules(allow, tools))
    if yes:
        return policy, _approve
    return policy, ask if interactive else _refuse


async def _approve(request: PermissionRequest) -> PermissionVerdict:
    return PermissionVerdict(True, "approved by --yes")


async def _refuse(request: PermissionRequest) -> PermissionVerdict:
    return PermissionVerdict(
        False,
        f"confirmation required and this run is not interactive; rerun with --allow {request.tool_name} or --yes",
        interrupt=True,
    )
