"""No module of the product (``gateway/``, ``loop/``) runs over 400 lines: a bigger one is split
by what it holds (the developers' guide: modules small, named for what they hold)."""

from __future__ import annotations

from pathlib import Path

from tests.support.import_graph import REPO, python_files

MAX_LINES = 400
PACKAGES = ("gateway", "loop")


def _lines(path: Path) -> int:
    with path.open("rb") as handle:
        return sum(1 for _ in handle)


def test_no_product_module_is_over_the_limit() -> None:
    sizes = {
        str(path.relative_to(REPO)): _lines(path) for package in PACKAGES for path in python_files(package)
    }
    assert len(sizes) > 150  # the packages were found
    over = {name: lines for name, lines in sizes.items() if lines > MAX_LINES}
    assert over == {}, f"split these modules (at most {MAX_LINES} lines each): {over}"
