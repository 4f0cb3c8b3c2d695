"""The package boundaries and the no-cycles rule, read from the source (tests/support/import_graph).

* ``gateway/`` (the server) never imports the repository's tools (``emulators``, ``bench``,
  ``tests``) nor the ``anthropic`` SDK, not even lazily; ``loop/`` imports the SDK only in its SDK
  caller (the ``sdk`` extra);
* ``emulators/`` is an independent oracle: it imports nothing of the code it checks (``gateway``,
  ``loop``) nor the tools built on it;
* no import cycle inside ``gateway``+``loop``, ``emulators`` or ``bench`` (also run by ``make lint``).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.import_graph import REPO, cycles, graph, imports_of, python_files

TOOLS = ("emulators", "bench", "tests")


def _imports_of_roots(package: str, roots: tuple[str, ...], root: Path = REPO) -> list[str]:
    """``path:line -> target`` for every import in ``package`` of a module under one of ``roots``."""
    found = []
    for path in python_files(package, root):
        for imp in imports_of(path, root):
            module = imp.source if imp.source is not None else imp.target
            if module.split(".")[0] in roots:
                found.append(f"{path.relative_to(root)}:{imp.line} -> {module}")
    return found


def test_the_gateway_imports_no_tool_and_not_the_sdk() -> None:
    assert _imports_of_roots("gateway", (*TOOLS, "anthropic")) == []


def test_the_loop_imports_no_tool_and_the_sdk_only_in_its_sdk_caller() -> None:
    assert _imports_of_roots("loop", TOOLS) == []
    sdk = _imports_of_roots("loop", ("anthropic",))
    assert sdk and all(line.startswith("loop/callers/sdk.py:") for line in sdk), sdk


def test_the_emulators_import_nothing_they_check() -> None:
    assert _imports_of_roots("emulators", ("gateway", "loop", "bench", "tests")) == []


@pytest.mark.parametrize("packages", [("gateway", "loop"), ("emulators",), ("bench",)])
def test_no_import_cycles(packages: tuple[str, ...]) -> None:
    edges = graph(packages)
    assert len(edges) > 10  # the packages were found
    assert cycles(edges) == []


PROBE = """
import importlib, importlib.abc, pkgutil, sys
BLOCKED = {"anthropic", "emulators", "bench", "tests"}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"blocked: {name}")
        return None
sys.meta_path.insert(0, Block())
import gateway, loop
SDK_USERS = {"gateway.__main__", "loop.callers.sdk"}  # __main__ runs the CLI on import
names = [
    m.name
    for package in (gateway, loop)
    for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
    if m.name not in SDK_USERS
]
for name in names:
    importlib.import_module(name)
from gateway.cli import main
try:
    main(["serve", "--help"])
except SystemExit as exit:
    assert exit.code == 0, exit.code
print(len(names), sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED))
"""


def test_every_module_imports_without_the_sdk_and_the_tools() -> None:
    """What ``pip install .`` gives ``switchyard serve`` and ``switchyard agent``: neither the SDK
    nor the tools are there (only the SDK caller needs the ``sdk`` extra; the agent demo imports it when
    it runs)."""
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert result.returncode == 0, result.stderr[-3000:]
    count, loaded = result.stdout.strip().splitlines()[-1].split(" ", 1)
    assert int(count) > 150 and loaded == "[]"


def _plant(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_the_checker_sees_lazy_and_relative_imports_but_not_type_checking_ones(tmp_path: Path) -> None:
    _plant(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg import b\n",
            "pkg/b.py": "def f():\n    from . import c\n",
            "pkg/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n",
            "pkg/d.py": "import pkg.e\n",
            "pkg/e.py": "def g():\n    from .d import name\n    import emulators.core\n",
        },
    )
    edges = graph(["pkg"], tmp_path)
    assert edges["pkg.a"] == {"pkg.b"} and edges["pkg.b"] == {"pkg.c"} and edges["pkg.c"] == set()
    assert cycles(edges) == [["pkg.d", "pkg.e"]]  # a -> b -> c does not close: c's import is typing-only
    assert _imports_of_roots("pkg", ("emulators",), tmp_path) == ["pkg/e.py:3 -> emulators.core"]


def test_the_checker_sees_the_package_inits_an_import_runs(tmp_path: Path) -> None:
    """Importing ``pkg.sub.leaf`` runs ``pkg/sub/__init__.py``: a cycle through a package's
    re-exports counts (a sibling inside the package does not run its own package again)."""
    _plant(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/sub/__init__.py": "from pkg.sub import heavy\n",
            "pkg/sub/leaf.py": "",
            "pkg/sub/leaf2.py": "from pkg.sub import leaf\n",
            "pkg/sub/heavy.py": "def f():\n    from pkg import user\n    from pkg.sub import leaf2\n",
            "pkg/user.py": "from pkg.sub.leaf import name\n",
        },
    )
    edges = graph(["pkg"], tmp_path)
    assert edges["pkg.user"] == {"pkg.sub.leaf", "pkg.sub"} and edges["pkg.sub.leaf2"] == {"pkg.sub.leaf"}
    assert cycles(edges) == [["pkg.sub", "pkg.sub.heavy", "pkg.user"]]
