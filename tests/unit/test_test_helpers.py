"""Test helpers live in ``tests/support/`` modules; a ``conftest.py`` holds only fixtures and pytest
hooks, and nothing imports a conftest as a module (pytest loads conftests itself; importing one
runs it a second time under another name and hides where a helper lives)."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from tests.support.import_graph import REPO, imports_of, python_files


def conftest_imports(root: Path = REPO) -> list[str]:
    """``path:line -> module`` for every import of a conftest under ``root/tests``."""
    found = []
    for path in python_files("tests", root):
        for imp in imports_of(path, root):
            module = imp.source if imp.source is not None else imp.target
            if "conftest" in module.split(".") or imp.target.endswith(".conftest"):
                found.append(f"{path.relative_to(root)}:{imp.line} -> {module}")
    return found


def _is_fixture(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return isinstance(target, ast.Attribute) and target.attr == "fixture"


def non_fixture_definitions(root: Path = REPO) -> list[str]:
    """``path:line name`` for every top-level class, function or public name of a conftest under
    ``root/tests`` that is not a fixture, a ``pytest_*`` hook or ``pytest_plugins``."""
    found = []
    for path in sorted((root / "tests").rglob("conftest.py")):
        for node in ast.parse(path.read_text()).body:
            names: list[str] = []
            if isinstance(node, ast.ClassDef):
                names = [node.name]
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                if not node.name.startswith("pytest_") and not any(map(_is_fixture, node.decorator_list)):
                    names = [node.name]
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = [
                    t.id
                    for t in targets
                    if isinstance(t, ast.Name) and not t.id.startswith("_") and t.id != "pytest_plugins"
                ]
            found.extend(f"{path.relative_to(root)}:{node.lineno} {name}" for name in names)
    return found


def test_nothing_imports_a_conftest() -> None:
    assert conftest_imports() == []


def test_conftests_hold_only_fixtures_and_hooks() -> None:
    assert non_fixture_definitions() == []


def test_the_checks_see_helpers_in_a_conftest_and_imports_of_it(tmp_path: Path) -> None:
    files = {
        "tests/__init__.py": "",
        "tests/area/__init__.py": "",
        "tests/area/conftest.py": """
            import pytest
            KEY = "k"
            _PRIVATE = 1
            pytest_plugins = ("x",)
            class Stack: ...
            def helper(): ...
            @pytest.fixture
            def stack(): ...
            @pytest.fixture(params=[1])
            async def other(): ...
            def pytest_terminal_summary(terminalreporter): ...
        """,
        "tests/area/test_a.py": "from tests.area.conftest import KEY\n",
        "tests/area/test_b.py": "def t():\n    import tests.area.conftest\n",
        "tests/area/test_c.py": "from tests.area import conftest\nfrom tests.support import stacks\n",
    }
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    assert conftest_imports(tmp_path) == [
        "tests/area/test_a.py:1 -> tests.area.conftest",
        "tests/area/test_b.py:2 -> tests.area.conftest",
        "tests/area/test_c.py:1 -> tests.area",
    ]
    assert non_fixture_definitions(tmp_path) == [
        "tests/area/conftest.py:3 KEY",
        "tests/area/conftest.py:6 Stack",
        "tests/area/conftest.py:7 helper",
    ]
