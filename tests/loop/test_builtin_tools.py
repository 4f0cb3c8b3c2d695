"""The built-in file tools: behaviour, and confinement to the workspace."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from loop.outcome import ToolUse
from loop.testing import VirtualClock
from loop.tools import PermissionMode, PermissionPolicy
from loop.tools.builtin import builtin_tools
from loop.tools.dispatcher import ToolDispatcher
from loop.tools.registry import ToolRegistry


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("def main():\n    return 'TODO'\n\nprint(main())\n")
    (root / "README.md").write_text("# demo\nTODO: write docs\n")
    (tmp_path / "secret.txt").write_text("top secret\n")
    return root


async def call(root: Path, name: str, **tool_input: Any) -> dict[str, Any]:
    dispatcher = ToolDispatcher(
        ToolRegistry(builtin_tools(root)),
        clock=VirtualClock(),
        policy=PermissionPolicy(mode=PermissionMode.BYPASS_PERMISSIONS),
    )
    return await dispatcher.dispatch(ToolUse("toolu_x", name, tool_input), turn=1)


async def test_read_file(project: Path) -> None:
    assert (await call(project, "read_file", path="src/app.py"))["content"].startswith("def main():")
    part = await call(project, "read_file", path="src/app.py", offset=2, limit=1)
    assert part["content"] == "    return 'TODO'\n"
    missing = await call(project, "read_file", path="nope.txt")
    assert missing["is_error"] and missing["content"] == "file not found: nope.txt"


async def test_read_file_refuses_binary(project: Path) -> None:
    (project / "blob.bin").write_bytes(b"\x00\x01\x02")
    result = await call(project, "read_file", path="blob.bin")
    assert result["is_error"] and "binary file" in result["content"]


async def test_list_directory(project: Path) -> None:
    assert (await call(project, "list_directory"))["content"] == "README.md\nsrc/"
    assert (await call(project, "list_directory", path="src"))["content"] == "app.py"


async def test_search_files(project: Path) -> None:
    result = await call(project, "search_files", pattern=r"TODO")
    assert result["content"].splitlines() == [
        "README.md:2: TODO: write docs",
        "src/app.py:2:     return 'TODO'",
    ]
    only_py = await call(project, "search_files", pattern="TODO", glob="*.py")
    assert only_py["content"] == "src/app.py:2:     return 'TODO'"
    bad = await call(project, "search_files", pattern="(")
    assert bad["is_error"] and "invalid regular expression" in bad["content"]


async def test_edit_file_replaces_one_exact_unique_occurrence(project: Path) -> None:
    result = await call(project, "edit_file", path="src/app.py", old_string="'TODO'", new_string="'done'")
    assert result["content"] == "Edited src/app.py: replaced 1 occurrence at line 2."
    assert "'done'" in (project / "src" / "app.py").read_text()
    (project / "twice.txt").write_text("a a")
    ambiguous = await call(project, "edit_file", path="twice.txt", old_string="a", new_string="b")
    assert ambiguous["is_error"] and "occurs 2 times" in ambiguous["content"]
    absent = await call(project, "edit_file", path="twice.txt", old_string="zzz", new_string="b")
    assert absent["is_error"] and "not found" in absent["content"]
    assert (project / "twice.txt").read_text() == "a a"


async def test_write_file_creates_and_overwrites(project: Path) -> None:
    created = await call(project, "write_file", path="docs/new.md", content="hello")
    assert created["content"] == "Created docs/new.md (5 characters)."
    again = await call(project, "write_file", path="docs/new.md", content="bye")
    assert again["content"] == "Overwrote docs/new.md (3 characters)."
    assert (project / "docs" / "new.md").read_text() == "bye"


ESCAPES = ["../secret.txt", "src/../../secret.txt", "/etc/passwd", "{outside}"]


@pytest.mark.parametrize("escape", ESCAPES)
@pytest.mark.parametrize(
    ("tool", "extra"),
    [
        ("read_file", {}),
        ("list_directory", {}),
        ("search_files", {"pattern": "secret"}),
        ("edit_file", {"old_string": "top", "new_string": "no"}),
        ("write_file", {"content": "pwned"}),
    ],
)
async def test_paths_outside_the_workspace_are_refused(
    project: Path, tool: str, extra: dict[str, Any], escape: str
) -> None:
    path = escape.format(outside=project.parent / "secret.txt")
    result = await call(project, tool, path=path, **extra)
    assert result["is_error"] is True
    assert "is outside the workspace" in result["content"]
    assert (project.parent / "secret.txt").read_text() == "top secret\n"


async def test_symlinks_out_of_the_workspace_are_refused(project: Path) -> None:
    os.symlink(project.parent / "secret.txt", project / "link.txt")
    os.symlink(project.parent, project / "up")
    for tool, extra in [
        ("read_file", {"path": "link.txt"}),
        ("edit_file", {"path": "link.txt", "old_string": "top", "new_string": "no"}),
        ("write_file", {"path": "link.txt", "content": "pwned"}),
        ("read_file", {"path": "up/secret.txt"}),
        ("list_directory", {"path": "up"}),
        ("write_file", {"path": "up/planted.txt", "content": "x"}),
    ]:
        result = await call(project, tool, **extra)
        assert result["is_error"] and "outside the workspace" in result["content"], (tool, extra)
    assert (project.parent / "secret.txt").read_text() == "top secret\n"
    assert not (project.parent / "planted.txt").exists()
    search = await call(project, "search_files", pattern="secret")
    assert search["content"] == "(no matches)"  # the link is not followed


async def test_symlinks_inside_the_workspace_work_and_absolute_paths_inside_are_fine(project: Path) -> None:
    os.symlink(project / "src" / "app.py", project / "alias.py")
    assert (await call(project, "read_file", path="alias.py"))["content"].startswith("def main")
    absolute = str(project / "README.md")
    assert (await call(project, "read_file", path=absolute))["content"].startswith("# demo")


def test_the_schemas_the_model_sees() -> None:
    from loop.tools.builtin import EditFile, Workspace

    schema = EditFile(Workspace(".")).definition()["input_schema"]
    assert schema["required"] == ["path", "old_string", "new_string"]
    assert schema["additionalProperties"] is False
