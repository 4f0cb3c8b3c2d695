"""The repository's import graph, read from the source (``ast``), not by importing anything.

Every ``import`` / ``from ... import`` statement counts, at module level or inside a function (a
lazy import still runs), except those under ``if TYPE_CHECKING:`` (never executed). Importing
``a.b.c`` also runs the packages ``a`` and ``a.b`` (their ``__init__``): an edge to each, unless
the importer is inside that package (it is loaded already). Used by ``tests/unit/test_layout.py``
for the package boundaries and the no-cycles rule, and by ``make lint``.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True, slots=True)
class Import:
    module: str  # the importing module (dotted)
    target: str  # the imported module, or ``from``-imported name (dotted, absolute)
    line: int
    source: str | None = None  # ``from X import ...``: X, what is imported when target is no module

    def resolve(self, modules: set[str] | frozenset[str]) -> str | None:
        """The module of ``modules`` this statement imports (``a.b`` for ``from a import b`` when
        ``a.b`` is a module, else ``a``), or None."""
        if self.target in modules:
            return self.target
        return self.source if self.source in modules else None


def module_name(path: Path, root: Path = REPO) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def python_files(package: str, root: Path = REPO) -> list[Path]:
    return sorted((root / package).rglob("*.py"))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _statements(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:  # the ``else`` branch does run
                yield from _statements(ast.Module(body=[child], type_ignores=[]))
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        yield from _statements(node)


def imports_of(path: Path, root: Path = REPO) -> list[Import]:
    """Every executed import of ``path``, with relative imports made absolute."""
    module = module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Import] = []
    for node in _statements(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.extend(Import(module, alias.name, node.lineno) for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        found.extend(Import(module, f"{base}.{alias.name}", node.lineno, base) for alias in node.names)
    return found


def graph(packages: Iterable[str], root: Path = REPO) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports (names that are not modules dropped)."""
    files = [path for package in packages for path in python_files(package, root)]
    modules = {module_name(path, root) for path in files}
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for path in files:
        for imp in imports_of(path, root):
            target = imp.resolve(modules)
            if target is not None and target != imp.module:
                edges[imp.module].add(target)
                edges[imp.module].update(_packages_run(target, imp.module, modules))
    return edges


def _packages_run(target: str, importer: str, modules: set[str]) -> set[str]:
    """The packages of ``modules`` whose ``__init__`` importing ``target`` runs (its ancestors),
    except those ``importer`` itself belongs to (already loaded when it runs)."""
    parts = target.split(".")
    ancestors = (".".join(parts[:end]) for end in range(1, len(parts)))
    return {
        package
        for package in ancestors
        if package in modules and package != importer and not importer.startswith(package + ".")
    }


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:  # iterative: deep import chains must not hit the recursion limit
        nonlocal counter
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for name in sorted(edges):
        if name not in index:
            visit(name)
    return found


def main(argv: list[str]) -> int:
    """``python -m tests.support.import_graph PACKAGE...`` (``make lint``): exit 1 on a cycle."""
    found = cycles(graph(argv or ["gateway", "loop"]))
    for component in found:
        print("import cycle: " + " <-> ".join(component), file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
