"""A test needing a missing system binary skips with a reason naming it, and the run ends with one
line listing what was skipped for a missing binary (tests/support/binaries.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support import binaries
from tests.support.import_graph import REPO

TESTS = """
import pytest
from tests.support import binaries

def test_needs_kubectl():
    binaries.require("kubectl")

@binaries.skip_unless("redis-server", "redis-cli")
def test_needs_redis():
    pass

@pytest.mark.parametrize("n", [1, 2])
def test_needs_prometheus(n):
    binaries.require("prometheus")

def test_skipped_for_another_reason():
    pytest.skip("not a binary")

def test_runs():
    assert binaries.require("sh")
"""


def test_the_run_ends_with_the_binaries_it_missed(tmp_path: Path) -> None:
    (tmp_path / "test_needs.py").write_text(TESTS)
    bin_dir = tmp_path / "bin"  # a PATH with a shell and python, without the binaries asked for
    bin_dir.mkdir()
    (bin_dir / "sh").symlink_to("/bin/sh")
    env = {**os.environ, "PATH": str(bin_dir), "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-ra", "-p", "tests.support.binaries", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path / "test_needs.py")],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip
    lines = result.stdout.strip().splitlines()
    assert result.returncode == 0, result.stdout + result.stderr
    summary = [line for line in lines if line.startswith("skipped for a missing binary:")]
    assert summary == [
        "skipped for a missing binary: kubectl (1 test), prometheus (2 tests), redis-cli (1 test), "
        "redis-server (1 test)"
    ]
    assert lines.index(summary[0]) == len(lines) - 2  # after -ra's SKIPPED lines, before the totals
    assert "1 passed, 5 skipped" in lines[-1]


def test_the_skip_reason_names_the_binary_and_where_it_comes_from() -> None:
    reason = binaries.missing_reason(["redis-server", "redis-cli"])
    assert reason.startswith("missing binary: redis-server, redis-cli (Debian package redis-server;")
    assert binaries.binaries_in(f"Skipped: {reason}") == ["redis-server", "redis-cli"]
    assert binaries.binaries_in("Skipped: the open-file hard limit is too low") == []
    assert binaries.summary_line([]) == "skipped for a missing binary: none"
