"""The public API: ``gateway.__all__``, ``loop.__all__`` and the packages whose docstring says
"Public:". Every package of ``gateway/`` and ``loop/`` says in its docstring whether it is public
or internal (a line starting ``Public:`` or ``Internal:``); a public package's ``__all__`` lists
only names that exist, once each; ``import gateway`` loads nothing but itself."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.import_graph import REPO, module_name

ROOTS = ("gateway", "loop")
PUBLIC = {
    "gateway",
    "loop",
    "loop.callers",
    "loop.context",
    "loop.hooks",
    "loop.mcp",
    "loop.prompt",
    "loop.subagents",
    "loop.testing",
    "loop.tools",
    "loop.tools.builtin",
}
"""What README's layout section and ``loop``'s docstring call public; the docstrings must agree."""


def declarations(root: Path = REPO, roots: tuple[str, ...] = ROOTS) -> dict[str, str | None]:
    """Package -> ``"Public"``, ``"Internal"`` or None (no such line, or both) in its docstring."""
    found: dict[str, str | None] = {}
    for top in roots:
        for init in sorted((root / top).rglob("__init__.py")):
            doc = ast.get_docstring(ast.parse(init.read_text())) or ""
            kinds = {
                line.split(":")[0] for line in doc.splitlines() if line.startswith(("Public:", "Internal:"))
            }
            found[module_name(init, root)] = kinds.pop() if len(kinds) == 1 else None
    return found


def test_every_package_says_whether_it_is_public() -> None:
    found = declarations()
    assert len(found) > 10
    assert {name for name, kind in found.items() if kind is None} == set()
    assert {name for name, kind in found.items() if kind == "Public"} == PUBLIC


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_all_lists_existing_names_once(package: str) -> None:
    module = importlib.import_module(package)
    names = module.__all__
    assert names and len(names) == len(set(names)), names
    missing = [name for name in names if getattr(module, name, None) is None]
    assert missing == []


def test_the_gateway_names_are_the_objects_of_their_modules() -> None:
    import gateway
    from gateway.app import create_app
    from gateway.config import Settings

    assert gateway.Settings is Settings and gateway.create_app is create_app
    with pytest.raises(AttributeError, match="no attribute 'relay'"):
        gateway.__getattr__("relay")  # a module, not a public name: imported by path, not lazily


def test_importing_gateway_loads_nothing_else() -> None:
    probe = (
        "import sys, gateway; print(sorted(m for m in sys.modules if m.startswith(('gateway.', 'aiohttp'))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"


def test_declarations_are_read_from_package_docstrings(tmp_path: Path) -> None:
    packages = {
        "pkg/__init__.py": '"""Top.\n\nPublic: ``__all__``."""\n__all__ = []\n',
        "pkg/inner/__init__.py": '"""Inner.\n\nInternal: ours."""\n',
        "pkg/none/__init__.py": '"""Says nothing."""\n',
        "pkg/both/__init__.py": '"""Public: a.\nInternal: b."""\n',
        "pkg/mention/__init__.py": '"""Mentions Public: mid-line."""\n',
    }
    for name, text in packages.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    assert declarations(tmp_path, ("pkg",)) == {
        "pkg": "Public",
        "pkg.both": None,
        "pkg.inner": "Internal",
        "pkg.mention": None,
        "pkg.none": None,
    }
