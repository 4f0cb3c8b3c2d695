"""Module docstrings stay short: at most 12 lines in ``gateway/`` and ``loop/``, details in
``docs/internals/``. A ``Details: docs/internals/X.md`` pointer must name an existing file with a
``## <module path>`` heading, every heading there must name a module that points back to that file,
and ``docs/internals/README.md`` must index every file of the directory."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support.import_graph import REPO, python_files

MAX_LINES = 12
DOCS = Path("docs/internals")
POINTER = re.compile(r"^Details: (docs/internals/[A-Za-z0-9_.-]+\.md)\s*$", re.MULTILINE)
HEADING = re.compile(r"^## (\S+\.py)\s*$", re.MULTILINE)


def module_docstrings(root: Path = REPO) -> dict[str, str]:
    """``gateway/x.py`` -> its module docstring (as written: ``clean=False``), for modules that have one."""
    found = {}
    for package in ("gateway", "loop"):
        for path in python_files(package, root):
            doc = ast.get_docstring(ast.parse(path.read_text()), clean=False)
            if doc is not None:
                found[path.relative_to(root).as_posix()] = doc
    return found


def too_long(docs: dict[str, str]) -> dict[str, int]:
    return {path: len(doc.splitlines()) for path, doc in docs.items() if len(doc.splitlines()) > MAX_LINES}


def broken_pointers(docs: dict[str, str], root: Path = REPO) -> list[str]:
    """Pointers naming a missing file, or a file without a heading for the module that points to it."""
    broken = []
    for path, doc in docs.items():
        for target in POINTER.findall(doc):
            file = root / target
            if not file.is_file():
                broken.append(f"{path}: {target} does not exist")
            elif path not in HEADING.findall(file.read_text()):
                broken.append(f"{path}: {target} has no heading '## {path}'")
    return broken


def orphan_headings(docs: dict[str, str], root: Path = REPO) -> list[str]:
    """Headings of ``docs/internals`` naming a module that does not point to that file."""
    orphans = []
    for file in sorted((root / DOCS).glob("*.md")):
        target = file.relative_to(root).as_posix()
        for module in HEADING.findall(file.read_text()):
            if target not in POINTER.findall(docs.get(module, "")):
                orphans.append(f"{target}: '## {module}' but {module} does not point here")
    return orphans


def test_module_docstrings_are_at_most_twelve_lines() -> None:
    docs = module_docstrings()
    assert len(docs) > 100
    assert too_long(docs) == {}


def test_every_details_pointer_names_a_file_with_the_modules_heading() -> None:
    docs = module_docstrings()
    assert sum(len(POINTER.findall(doc)) for doc in docs.values()) > 50
    assert broken_pointers(docs) == []


def test_every_design_section_belongs_to_a_module_that_points_to_it() -> None:
    assert orphan_headings(module_docstrings()) == []


def test_the_index_lists_every_design_document() -> None:
    index = (REPO / DOCS / "README.md").read_text()
    files = sorted(f.name for f in (REPO / DOCS).glob("*.md") if f.name != "README.md")
    assert files and [name for name in files if f"({name})" not in index] == []


def test_the_checks_catch_what_they_look_for(tmp_path: Path) -> None:
    (tmp_path / DOCS).mkdir(parents=True)
    (tmp_path / DOCS / "a.md").write_text("# a\n\n## gateway/x.py\n\ntext\n\n## gateway/gone.py\n")
    docs = {
        "gateway/x.py": "X.\n\nDetails: docs/internals/a.md\n",
        "gateway/y.py": "Y.\n\nDetails: docs/internals/a.md\n",
        "gateway/z.py": "Z.\n\nDetails: docs/internals/missing.md\n",
        "gateway/long.py": "L.\n" * 13,
    }
    assert too_long(docs) == {"gateway/long.py": 13}
    assert broken_pointers(docs, tmp_path) == [
        "gateway/y.py: docs/internals/a.md has no heading '## gateway/y.py'",
        "gateway/z.py: docs/internals/missing.md does not exist",
    ]
    assert orphan_headings(docs, tmp_path) == [
        "docs/internals/a.md: '## gateway/gone.py' but gateway/gone.py does not point here"
    ]
