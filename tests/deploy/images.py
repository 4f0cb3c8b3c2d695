"""What a per-provider image (``docker build --build-arg PROVIDERS=...``) contains, computed from
pyproject.toml and the installed distributions' metadata, and a way to run Python as if only
that were installed (the other distributions' modules raise ``ModuleNotFoundError``).

No Docker engine is available where the tests run, so an image's content is derived the way pip
derives it: the project's dependencies plus the requested extras, closed over each installed
distribution's ``Requires-Dist`` (markers evaluated, dependency extras followed).
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from collections.abc import Iterable

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.deploy.manifests import ROOT

PROJECT = "switchyard"


def pyproject() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]  # type: ignore[no-any-return]


def _requirements(extras: Iterable[str]) -> list[Requirement]:
    """The project's own requirements for ``extras`` (self-references like switchyard[a,b] expanded)."""
    project = pyproject()
    optional: dict[str, list[str]] = project["optional-dependencies"]  # type: ignore[assignment]
    found = [Requirement(text) for text in project["dependencies"]]  # type: ignore[attr-defined]
    pending, seen = list(extras), set()
    while pending:
        extra = pending.pop()
        if extra in seen:
            continue
        seen.add(extra)
        assert extra in optional, f"pyproject.toml has no extra {extra!r}"
        for text in optional[extra]:
            requirement = Requirement(text)
            if canonicalize_name(requirement.name) == PROJECT:
                pending.extend(requirement.extras)
            else:
                found.append(requirement)
    return found


def distributions(extras: Iterable[str]) -> set[str]:
    """Canonical names of every distribution ``pip install .[extras]`` installs (besides the project)."""
    installed: set[str] = set()
    pending = _requirements(extras)
    while pending:
        requirement = pending.pop()
        name = canonicalize_name(requirement.name)
        key = f"{name}[{','.join(sorted(requirement.extras))}]"
        if key in installed:
            continue
        installed.add(key)
        wanted = ["", *sorted(requirement.extras)]
        for text in importlib.metadata.distribution(name).requires or []:
            dependency = Requirement(text)
            if dependency.marker is None or any(dependency.marker.evaluate({"extra": e}) for e in wanted):
                pending.append(dependency)
    return {key.split("[")[0] for key in installed}


def distribution_modules(name: str) -> set[str]:
    """The outermost importable modules a distribution provides (``google.auth``, not ``google``,
    for a namespace package)."""
    found: set[str] = set()
    for file in importlib.metadata.distribution(name).files or []:
        parts = file.parts
        if parts[0] == ".." or parts[0].endswith((".dist-info", ".data")) or "__pycache__" in parts:
            continue
        if len(parts) == 1 and re.search(r"\.(py|so)$", parts[0]):
            found.add(parts[0].split(".")[0])
        elif file.name == "__init__.py":
            found.add(".".join(parts[:-1]))
    return {m for m in found if not any(m.startswith(other + ".") for other in found)}


def absent_modules(providers: Iterable[str]) -> set[str]:
    """Modules an image built with ``PROVIDERS`` lacks, that the full image (all) has."""
    present = distributions([*providers, "redis"])
    missing = distributions(["all"]) - present
    return {module for name in missing for module in distribution_modules(name)}


BLOCKER = """
import atexit, importlib.abc, sys
ABSENT = {absent!r}
ATTEMPTS = []

class _NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == m or name.startswith(m + ".") for m in ABSENT):
            ATTEMPTS.append(name)
            raise ModuleNotFoundError(f"No module named {{name!r}} (not in this image)", name=name)
        return None

sys.meta_path.insert(0, _NotInstalled())

@atexit.register
def _report():
    loaded = sorted(m for m in sys.modules if any(m == a or m.startswith(a + ".") for a in ABSENT))
    with open({report!r}, "w") as out:
        out.write(repr({{"attempts": sorted(set(ATTEMPTS)), "loaded": loaded}}))
"""


def as_if_installed(providers: Iterable[str], report: str, then: str) -> str:
    """Python source: hide what the ``providers`` image lacks, record import attempts into
    ``report`` at exit, then run ``then``."""
    return BLOCKER.format(absent=sorted(absent_modules(providers)), report=report) + then
