"""MCP robustness: ``${VAR}`` / ``${VAR:-default}`` expansion as in Claude Code's ``.mcp.json``;
one server that fails (missing binary, no answer) does not fail the others, is reported, and its
tools are absent; resources as Claude Code's ``ListMcpResourcesTool`` / ``ReadMcpResourceTool``
and prompts as messages. Against the real npm servers (server-filesystem, server-everything) and,
for ``switchyard agent --mcp-config``, the emulator."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

import loop
from emulators import EmulatorConfig, RunningEmulator, emulator_in_thread
from loop.cli import main
from loop.events import ToolFinished
from loop.mcp import McpConfigError, ServerFailure, StdioServer, connect, load_configs, parse_servers
from loop.tools import PermissionMode, PermissionPolicy
from loop.transitions import Completed
from tests.loop.support import of_type, run_to_end
from tests.support.mcp_servers import server_binary

KEY = "sk-mcp-robust"


def test_variables_are_expanded_in_the_five_fields() -> None:
    environ = {"BIN": "/opt/srv", "ROOT": "/data", "TOKEN": "t0k3n", "EMPTY": "", "HOST": "127.0.0.1"}
    servers = parse_servers(
        {
            "mcpServers": {
                "local": {
                    "command": "${BIN}/server",
                    "args": ["--root=${ROOT}", "${MODE:-readonly}", "$ROOT", "${EMPTY:-unused}"],
                    "env": {"API_TOKEN": "${TOKEN}", "LEVEL": "${LEVEL:-info}"},
                },
                "remote": {
                    "type": "http",
                    "url": "http://${HOST}:${PORT:-8931}/mcp",
                    "headers": {"Authorization": "Bearer ${TOKEN}"},
                },
            }
        },
        environ,
    )
    local, remote = servers["local"], servers["remote"]
    assert local.command == "/opt/srv/server"  # type: ignore[union-attr]
    assert local.args == ["--root=/data", "readonly", "$ROOT", ""]  # type: ignore[union-attr]
    assert local.env == {"API_TOKEN": "t0k3n", "LEVEL": "info"}  # type: ignore[union-attr]
    assert remote.url == "http://127.0.0.1:8931/mcp"  # type: ignore[union-attr]
    assert remote.headers == {"Authorization": "Bearer t0k3n"}  # type: ignore[union-attr]


def test_an_unset_variable_without_default_names_server_field_and_variable() -> None:
    with pytest.raises(McpConfigError) as info:
        parse_servers(
            {
                "mcpServers": {
                    "gh": {
                        "type": "http",
                        "url": "https://x/mcp",
                        "headers": {"Authorization": "${GH_TOKEN}"},
                    }
                }
            },
            {"OTHER": "sk-secret-value"},
        )
    message = str(info.value)
    assert message == (
        "server 'gh': environment variables not set (and no ${VAR:-default}): headers.Authorization: ${GH_TOKEN}"
    )
    assert "sk-secret-value" not in message


async def test_one_failing_server_leaves_the_others(tmp_path: Path) -> None:
    files = tmp_path / "files"
    files.mkdir()
    (files / "a.txt").write_text("alpha\n")
    servers = parse_servers(
        {
            "mcpServers": {
                "ghost": {"command": str(tmp_path / "missing-binary")},
                "mute": {"command": "sleep", "args": ["30"], "timeout": 0.5},  # never answers initialize
                "fs": {"command": "${FS_BIN}", "args": ["${FILES}"], "permission": "readOnly"},
            }
        },
        {"FS_BIN": str(server_binary("filesystem")), "FILES": str(files)},
    )
    reported: list[ServerFailure] = []
    with (tmp_path / "err.log").open("w") as errlog:
        async with connect(servers, errlog=errlog, on_failure=reported.append) as tools:
            assert [f.server for f in tools.failures] == ["ghost", "mute"] and reported == tools.failures
            assert "no answer within 0.5s" in tools.failures[1].message
            names = [t.name for t in tools]
            assert names and all(n.startswith("mcp__fs__") for n in names)
            run = loop.query(
                loop.QueryParams(
                    "read it",
                    tools=tools,
                    deps=loop.LoopDeps(call_model=_read_model(str((files / "a.txt").resolve()))),
                    permissions=PermissionPolicy(mode=PermissionMode.DEFAULT),
                )
            )
            events = await run_to_end(run)
    assert run.terminal == Completed("end_turn")
    (finished,) = of_type(events, ToolFinished)
    assert finished.result["content"] == "alpha\n"


def _read_model(path: str) -> Any:
    from loop.testing import FakeModel, FakeResponse, text, tool_use

    return FakeModel(
        [FakeResponse.of(tool_use("mcp__fs__read_text_file", {"path": path})), FakeResponse.of(text("done"))]
    )


async def test_resources_and_prompts_of_server_everything(tmp_path: Path) -> None:
    servers = parse_servers(
        {"mcpServers": {"every": {"command": str(server_binary("everything")), "args": ["stdio"]}}}, {}
    )
    with (tmp_path / "err.log").open("w") as errlog:
        async with connect(servers, errlog=errlog) as tools:
            by_name = {t.name: t for t in tools}
            assert by_name["ListMcpResourcesTool"].read_only and by_name["ReadMcpResourceTool"].read_only
            from loop.testing import FakeModel, FakeResponse, text, tool_use

            model = FakeModel(
                [
                    FakeResponse.of(tool_use("ListMcpResourcesTool", {"server": "every"})),
                    FakeResponse.of(
                        tool_use(
                            "ReadMcpResourceTool",
                            {"server": "every", "uri": "demo://resource/static/document/architecture.md"},
                        )
                    ),
                    FakeResponse.of(text("read")),
                ]
            )
            run = loop.query(loop.QueryParams("look", tools=tools, deps=loop.LoopDeps(call_model=model)))
            events = await run_to_end(run)
            prompt = await tools.prompt("every", "args-prompt", {"city": "Lyon"})
    assert run.terminal == Completed("end_turn")
    listed, read = (e.result["content"] for e in of_type(events, ToolFinished))
    entries = orjson.loads(listed)
    architecture = next(e for e in entries if e["name"] == "architecture.md")
    assert architecture == {
        "uri": "demo://resource/static/document/architecture.md",
        "name": "architecture.md",
        "mimeType": "text/markdown",
        "description": architecture["description"],
        "server": "every",
    }
    assert read.startswith("# Everything Server")
    assert prompt[0]["role"] == "user" and "Lyon" in prompt[0]["content"][0]["text"]


@pytest.fixture
def emulator() -> Iterator[RunningEmulator]:
    with emulator_in_thread(EmulatorConfig(api_keys=frozenset({KEY}))) as emu:
        yield emu


def test_a_headless_run_goes_on_without_a_failing_server(
    emulator: RunningEmulator,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "todo.txt").write_text("buy milk\n")
    monkeypatch.setenv("SWITCHYARD_TEST_FS", str(server_binary("filesystem")))
    config = tmp_path / "mcp.json"
    fs = {"command": "${SWITCHYARD_TEST_FS}", "args": [str(workspace.resolve())], "permission": "readOnly"}
    config.write_text(json.dumps({"mcpServers": {"fs": fs}}))
    broken = {"command": "${SWITCHYARD_TEST_MISSING_DIR:-/nonexistent}/mcp-server"}
    inline = json.dumps({"mcpServers": {"broken": broken}})  # a JSON string, as Claude Code takes it
    todo = str((workspace / "todo.txt").resolve())
    prompt = (
        "[[scenario:agent]] [[tools:mcp__fs__read_text_file]] "
        f'[[input:mcp__fs__read_text_file {{"path": "{todo}"}}]] go'
    )
    argv = [prompt, "--workspace", str(workspace), "--base-url", emulator.base_url, "--api-key", KEY,
            "--json", "--mcp-config", inline, "--mcp-config", str(config)]  # fmt: skip
    code = main(argv)
    captured = capsys.readouterr()
    lines = [orjson.loads(line) for line in captured.out.splitlines()]
    assert code == 0, lines[-1]
    assert "switchyard agent: MCP server 'broken' failed to start" in captured.err
    assert "its tools are not available" in captured.err
    finished = next(line for line in lines if line["type"] == "tool_finished")
    assert finished["result"]["content"] == "buy milk\n"


def test_several_configs_files_and_json_strings(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_text(json.dumps({"mcpServers": {"a": {"command": "${A_BIN:-srv-a}"}}}))
    servers = load_configs([str(path), '{"mcpServers": {"b": {"command": "srv-b"}}}'], {})
    assert [(name, getattr(s, "command", None)) for name, s in servers.items()] == [
        ("a", "srv-a"),
        ("b", "srv-b"),
    ]
    with pytest.raises(McpConfigError, match="server 'a' is defined twice"):
        load_configs([str(path), str(path)], {})
    with pytest.raises(McpConfigError, match="the JSON given is not valid"):
        load_configs(["{nope"], {})


async def test_tool_names_that_clash_after_sanitising_are_made_unique(tmp_path: Path) -> None:
    # Servers "my.fs" and "my_fs" both gave mcp__my_fs__read_text_file...: every run using the
    # tools raised ValueError (two tools of one name).
    roots = {name: tmp_path / f"root{i}" for i, name in enumerate(("my.fs", "my_fs"))}
    for name, root in roots.items():
        root.mkdir()
        (root / "a.txt").write_text(f"in {name}\n")
    fs = str(server_binary("filesystem"))
    servers = {name: StdioServer(command=fs, args=[str(root)]) for name, root in roots.items()}  # in code
    with (tmp_path / "err.log").open("w") as errlog:
        async with connect(servers, errlog=errlog) as tools:
            names = [t.name for t in tools]
            assert tools.failures == [] and len(set(names)) == len(names)
            assert "mcp__my_fs__read_text_file" in names  # the name sanitising left alone is kept
            (renamed,) = [t for t in tools if getattr(t, "remote_name", "") == "read_text_file" and t.name != "mcp__my_fs__read_text_file"]  # fmt: skip
            assert renamed.name.startswith("mcp__my_fs__read_text_file_") and len(renamed.name) <= 64
            async with connect(servers, errlog=errlog) as again:
                assert [t.name for t in again] == names  # deterministic
            from loop.testing import FakeModel, FakeResponse, text, tool_use

            paths = {name: str((root / "a.txt").resolve()) for name, root in roots.items()}
            model = FakeModel(
                [
                    FakeResponse.of(
                        tool_use(renamed.name, {"path": paths["my.fs"]}),
                        tool_use("mcp__my_fs__read_text_file", {"path": paths["my_fs"]}),
                    ),
                    FakeResponse.of(text("done")),
                ]
            )
            run = loop.query(
                loop.QueryParams(
                    "read both",
                    tools=tools,
                    deps=loop.LoopDeps(call_model=model),
                    permissions=PermissionPolicy(mode=PermissionMode.DONT_ASK),
                )
            )
            events = await run_to_end(run)
    assert run.terminal == Completed("end_turn")
    assert sorted(e.result["content"] for e in of_type(events, ToolFinished)) == ["in my.fs\n", "in my_fs\n"]
