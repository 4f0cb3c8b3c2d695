"""System binaries some tests need (kubectl, redis-server, prometheus, squid, ...): a test that
needs a missing one is skipped with a reason of a fixed shape, and the run ends with one line
listing them (``tests/conftest.py``, ``pytest_terminal_summary``). ``.ci/run`` installs them all.
"""

from __future__ import annotations

import re
import shutil
from collections import Counter
from collections.abc import Generator, Iterable

import pytest

PACKAGES = {
    "kubectl": "kubectl >= 1.27, for `kubectl kustomize` with Components",
    "redis-server": "Debian package redis-server",
    "redis-cli": "Debian package redis-server",
    "prometheus": "Debian package prometheus",
    "promtool": "Debian package prometheus",
    "squid": "Debian package squid",
    "openssl": "Debian package openssl",
    "node": "Debian package nodejs",
}
_REASON = re.compile(r"missing binary: ([\w.+-]+(?:, [\w.+-]+)*) \(")


def missing_reason(names: Iterable[str]) -> str:
    """The skip reason for ``names`` being absent (the end-of-run summary parses it)."""
    names = list(names)
    where = "; ".join(dict.fromkeys(PACKAGES.get(name, name) for name in names))
    return f"missing binary: {', '.join(names)} ({where}; .ci/run installs it)"


def missing(*names: str) -> list[str]:
    return [name for name in names if shutil.which(name) is None]


def require(name: str) -> str:
    """The path of binary ``name`` on PATH, or a skip of the calling test."""
    path = shutil.which(name)
    if path is None:
        pytest.skip(missing_reason([name]))
    return path


def skip_unless(*names: str) -> pytest.MarkDecorator:
    """A ``skipif`` mark for tests (or a module's ``pytestmark``) needing every one of ``names``."""
    absent = missing(*names)
    return pytest.mark.skipif(bool(absent), reason=missing_reason(absent))


def binaries_in(reason: str) -> list[str]:
    """The binaries a skip reason made by :func:`missing_reason` names ([] for any other reason)."""
    found = _REASON.search(reason)
    return found.group(1).split(", ") if found else []


def summary_line(reasons: Iterable[str]) -> str:
    """``skipped for a missing binary: kubectl (12 tests), redis-server (1 test)`` (or ``none``)."""
    counts = Counter(name for reason in reasons for name in binaries_in(reason))
    listed = ", ".join(f"{name} ({n} test{'s' if n > 1 else ''})" for name, n in sorted(counts.items()))
    return f"skipped for a missing binary: {listed or 'none'}"


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> Generator[None]:
    """The run's last line before pytest's own totals (after the ``-ra`` short summary, which the
    terminal reporter's wrapper prints on its way out): what went unverified for a missing binary.
    A plugin: ``tests/conftest.py`` loads it with ``pytest_plugins``."""
    yield
    reasons = []
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reasons.append(longrepr[2] if isinstance(longrepr, tuple) else str(longrepr))
    terminalreporter.write_line(summary_line(reasons))
