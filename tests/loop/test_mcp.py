"""MCP tools: the servers file, names, result mapping, and end-to-end runs through the gateway and
the emulator with real MCP servers from npm (``@modelcontextprotocol/server-filesystem`` and
``server-everything``) over stdio and streamable HTTP."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp.types as mcp_types
import orjson
import pytest

import loop
from loop.callers import SdkModelCaller
from loop.events import ToolFinished
from loop.mcp import McpConfigError, McpServerError, Permission, connect, parse_servers, tool_name
from loop.mcp.tools import McpTool, result_content, unique_names
from loop.tools import PermissionMode, PermissionPolicy
from loop.transitions import Completed
from tests.loop.support import of_type, pairing_violations, run_to_end
from tests.support.loop_stack import GATEWAY_KEY, LoopStack
from tests.support.mcp_servers import everything_http, server_binary

# --- the servers file -------------------------------------------------------------------------


def test_the_claude_code_servers_file_shape() -> None:
    servers = parse_servers(
        {
            "mcpServers": {
                "files": {"command": "npx", "args": ["-y", "pkg", "/srv"], "env": {"A": "1"}},
                "typed": {"type": "stdio", "command": "srv", "permission": "readOnly", "timeout": 5},
                "remote": {
                    "type": "http",
                    "url": "http://127.0.0.1:9/mcp",
                    "headers": {"Authorization": "Bearer secret-token"},
                    "toolPermissions": {"close": "destructive", "list": "readOnly"},
                    "permission": "edit",
                },
            }
        }
    )
    files, typed, remote = servers["files"], servers["typed"], servers["remote"]
    assert files.type == "stdio" and files.args == ["-y", "pkg", "/srv"] and files.env == {"A": "1"}
    assert files.permission_of("anything") is Permission.DESTRUCTIVE  # asks unless declared otherwise
    assert typed.permission_of("x") is Permission.READ_ONLY and typed.timeout_s == 5
    assert remote.type == "http" and remote.headers == {"Authorization": "Bearer secret-token"}
    assert [remote.permission_of(t) for t in ("close", "list", "other")] == [
        Permission.DESTRUCTIVE,
        Permission.READ_ONLY,
        Permission.EDIT,
    ]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "mcpServers"),
        ({"servers": {}}, "mcpServers"),
        ({"mcpServers": {"bad name": {"command": "x"}}}, "server name"),
        ({"mcpServers": {"s": {"type": "sse", "url": "http://127.0.0.1/sse"}}}, "SSE transport"),
        ({"mcpServers": {"s": {"args": ["x"]}}}, "server 's': command: Field required"),
        ({"mcpServers": {"s": {"type": "http", "url": "ftp://x"}}}, "url: String should match"),
        ({"mcpServers": {"s": {"command": "x", "permission": "sometimes"}}}, "permission: Input should be"),
        ({"mcpServers": {"s": {"command": "x", "extra": 1}}}, "extra: Extra inputs are not permitted"),
    ],
)
def test_invalid_servers_files_name_the_server_and_field(data: Any, message: str) -> None:
    with pytest.raises(McpConfigError, match=message):
        parse_servers(data)


def test_a_header_value_never_appears_in_an_error() -> None:
    with pytest.raises(McpConfigError) as info:
        parse_servers(
            {"mcpServers": {"s": {"type": "http", "url": 5, "headers": {"X-Key": "sk-very-secret"}}}}
        )
    assert "sk-very-secret" not in str(info.value)


@pytest.mark.parametrize(
    ("server", "tool", "expected"),
    [
        ("fs", "read_file", "mcp__fs__read_file"),
        ("every", "get-sum", "mcp__every__get-sum"),
        ("x", "a.b c/d", "mcp__x__a_b_c_d"),
    ],
)
def test_tool_names(server: str, tool: str, expected: str) -> None:
    assert tool_name(server, tool) == expected


def test_long_tool_names_are_cut_and_stay_unique() -> None:
    first, second = tool_name("server", "t" * 80 + "1"), tool_name("server", "t" * 80 + "2")
    assert len(first) == len(second) == 64 and first != second
    assert first.startswith("mcp__server__ttt")


def test_tools_whose_names_clash_are_renamed_deterministically() -> None:
    def tools(*pairs: tuple[str, str]) -> list[McpTool]:
        session: Any = None
        return [
            McpTool(server, mcp_types.Tool(name=name, input_schema={"type": "object"}), session, Permission.EDIT)
            for server, name in pairs
        ]

    listed = tools(("raw", "get.item"), ("raw", "get_item"), ("raw", "get item"), ("a", "b__c"), ("a__b", "c"))
    unique_names(listed)
    names = [t.name for t in listed]
    assert len(set(names)) == len(names) and all(len(n) <= 64 for n in names)
    assert names[1] == "mcp__raw__get_item"  # the one sanitising left alone
    assert names[0].startswith("mcp__raw__get_item_") and names[2].startswith("mcp__raw__get_item_")
    assert names[3].startswith("mcp__a__b__c_") and names[4].startswith("mcp__a__b__c_")  # both as listed
    reordered = tools(("a__b", "c"), ("raw", "get item"), ("raw", "get_item"), ("a", "b__c"), ("raw", "get.item"))
    unique_names(reordered)
    assert sorted(t.name for t in reordered) == sorted(names)


def test_result_content_mapping() -> None:
    png = base64.b64encode(b"\x89PNG fake").decode()
    result = mcp_types.CallToolResult(
        content=[
            mcp_types.TextContent(text="hello"),
            mcp_types.ImageContent(data=png, mime_type="image/png"),
            mcp_types.ImageContent(data=png, mime_type="image/bmp"),
            mcp_types.AudioContent(data="AAAA", mime_type="audio/wav"),
            mcp_types.EmbeddedResource(
                resource=mcp_types.TextResourceContents(uri="file:///a.txt", text="embedded text")
            ),
            mcp_types.ResourceLink(uri="file:///b.txt", name="b.txt"),
        ]
    )
    assert result_content(result) == [
        {"type": "text", "text": "hello"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}},
        {"type": "text", "text": "[image omitted: image/bmp is not a type the model accepts]"},
        {"type": "text", "text": "[audio omitted: audio/wav, 3 bytes]"},
        {"type": "text", "text": "embedded text"},
        {"type": "text", "text": "[resource link: b.txt file:///b.txt]"},
    ]
    texts = mcp_types.CallToolResult(
        content=[mcp_types.TextContent(text="a"), mcp_types.TextContent(text="b")]
    )
    assert result_content(texts) == "a\nb"
    structured = mcp_types.CallToolResult(content=[], structured_content={"t": 21.5})
    assert result_content(structured) == '{"t":21.5}'
    png_only = mcp_types.CallToolResult(
        content=[mcp_types.TextContent(text=""), mcp_types.ImageContent(data=png, mime_type="image/png")]
    )  # the empty text block was sent, and the API refuses those
    assert result_content(png_only) == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}
    ]
    empty_image = mcp_types.CallToolResult(content=[mcp_types.ImageContent(data="", mime_type="image/png")])
    assert result_content(empty_image) == [
        {"type": "text", "text": '{"type":"image","source":{"type":"base64","media_type":"image/png","data":""}}'}
    ]


async def test_a_server_that_cannot_start_is_named(tmp_path: Path) -> None:
    servers = parse_servers({"mcpServers": {"ghost": {"command": str(tmp_path / "missing-binary")}}})
    with (tmp_path / "err.log").open("w") as errlog, pytest.raises(McpServerError, match="'ghost'"):
        async with connect(servers, errlog=errlog, strict=True):
            pass
    with (tmp_path / "err.log").open("w") as errlog:
        async with connect(servers, errlog=errlog) as tools:
            assert tools == [] and [f.server for f in tools.failures] == ["ghost"]
            assert "'ghost' failed to start: FileNotFoundError" in tools.failures[0].message


# --- end to end: real servers, the gateway and the emulator ------------------------------------


@pytest.fixture
async def sdk(stack: LoopStack) -> AsyncIterator[SdkModelCaller]:
    async with SdkModelCaller(stack.gateway_url, GATEWAY_KEY, max_retries=0) as caller:
        yield caller


def _bodies(stack: LoopStack) -> list[dict[str, Any]]:
    return [orjson.loads(r.body) for r in stack.emulator.requests if r.path.startswith("/v1/messages")]


def _results(body: dict[str, Any]) -> dict[str, Any]:
    return {b["tool_use_id"]: b for b in body["messages"][-1]["content"] if b.get("type") == "tool_result"}


async def test_stdio_servers_end_to_end(stack: LoopStack, sdk: SdkModelCaller, tmp_path: Path) -> None:
    files = tmp_path / "files"
    files.mkdir()
    (files / "notes.txt").write_text("The meeting moved to Thursday.\n")
    servers = parse_servers(
        {
            "mcpServers": {
                "fs": {
                    "command": str(server_binary("filesystem")),
                    "args": [str(files)],
                    "permission": "readOnly",
                },
                "every": {
                    "command": str(server_binary("everything")),
                    "args": ["stdio"],
                    "toolPermissions": {"get-sum": "readOnly", "get-tiny-image": "readOnly"},
                },
            }
        }
    )
    notes = str((files / "notes.txt").resolve())
    order = "mcp__fs__read_text_file,mcp__every__get-sum,mcp__every__get-tiny-image,mcp__every__echo"
    prompt = (
        f"[[scenario:agent]] [[tools:{order}]] "
        f'[[input:mcp__fs__read_text_file {{"path": "{notes}"}}]] '
        '[[input:mcp__every__get-sum {"a": 2, "b": 40}]] [[input:mcp__every__echo {"message": "hi"}]] '
        "check my notes"
    )
    with (tmp_path / "servers.log").open("w") as errlog:
        async with connect(servers, errlog=errlog) as tools:
            run = loop.query(
                loop.QueryParams(
                    prompt,
                    tools=tools,
                    deps=loop.LoopDeps(call_model=sdk),
                    permissions=PermissionPolicy(mode=PermissionMode.ACCEPT_EDITS),
                )
            )
            events = await run_to_end(run)
    assert run.terminal == Completed("end_turn")
    finished = {e.name: e.result for e in of_type(events, ToolFinished)}
    assert finished["mcp__fs__read_text_file"]["content"] == "The meeting moved to Thursday.\n"
    assert finished["mcp__every__get-sum"]["content"] == "The sum of 2 and 40 is 42."
    image = finished["mcp__every__get-tiny-image"]["content"]
    assert [b["type"] for b in image][:2] == ["text", "image"]
    assert image[1]["source"]["media_type"] == "image/png"
    assert base64.b64decode(image[1]["source"]["data"]).startswith(b"\x89PNG")
    echo = finished["mcp__every__echo"]  # declared nothing: destructive, refused without a callback
    assert echo["is_error"] is True and "Permission denied" in echo["content"]

    bodies = _bodies(stack)
    assert len(bodies) == 5
    offered = {t["name"]: t for t in bodies[0]["tools"]}
    assert offered["mcp__every__get-sum"]["input_schema"]["required"] == ["a", "b"]
    sent_image = next(iter(_results(bodies[3]).values()))  # reached the upstream through the gateway
    assert sent_image["content"][1]["type"] == "image"
    for body in bodies:
        assert pairing_violations(body["messages"]) == []
    final = run.messages[-1]["content"][0]["text"]
    assert final.startswith(f"All tools finished ({order.replace(',', ', ')}).")


async def test_a_streamable_http_server_end_to_end(stack: LoopStack, sdk: SdkModelCaller) -> None:
    async with everything_http() as url:
        servers = parse_servers(
            {
                "mcpServers": {
                    "remote": {"type": "http", "url": url, "headers": {"X-Test": "1"}, "permission": "edit"}
                }
            }
        )
        async with connect(servers) as tools:
            prompt = (
                "[[scenario:agent]] [[tools:mcp__remote__get-sum,mcp__remote__echo]] "
                '[[input:mcp__remote__get-sum {"a": 1.5, "b": 2}]] [[input:mcp__remote__echo {"message": "over http"}]] go'
            )
            run = loop.query(
                loop.QueryParams(
                    prompt,
                    tools=tools,
                    deps=loop.LoopDeps(call_model=sdk),
                    permissions=PermissionPolicy(mode=PermissionMode.ACCEPT_EDITS),  # "edit": allowed
                )
            )
            events = await run_to_end(run)
    assert run.terminal == Completed("end_turn")
    finished = {e.name: e.result for e in of_type(events, ToolFinished)}
    assert finished["mcp__remote__get-sum"]["content"] == "The sum of 1.5 and 2 is 3.5."
    assert finished["mcp__remote__echo"]["content"] == "Echo: over http"
    assert len(_bodies(stack)) == 3
