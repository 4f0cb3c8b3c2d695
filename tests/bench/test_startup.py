"""``python -m bench startup``: the ``-X importtime`` reading, and one real run (two gateways and two
pass-throughs spawned against the fake upstream) whose figures are checked for shape, not speed."""

from __future__ import annotations

import subprocess
import sys

import orjson

from bench import REPO_ROOT, startup

IMPORTTIME = """\
import time: self [us] | cumulative | imported package
import time:       120 |        120 |   _io
import time:      2500 |       2500 |     gateway.settings.section
import time:      4000 |       6500 |   gateway.config
import time: 1000 | 7500 | gateway.cli
some other line on stderr
"""


def test_importtime_lines_are_read_with_their_depth() -> None:
    entries = startup.parse_importtime(IMPORTTIME)
    assert [(e.module, e.self_us, e.cumulative_us, e.depth) for e in entries] == [
        ("_io", 120, 120, 1),
        ("gateway.settings.section", 2500, 2500, 2),
        ("gateway.config", 4000, 6500, 1),
        ("gateway.cli", 1000, 7500, 0),
    ]


def test_a_real_run_reports_every_figure() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench", "startup", "--runs", "2", "--floor", "--json"],
        capture_output=True, cwd=REPO_ROOT, timeout=240, check=True,
    )  # fmt: skip
    figures = orjson.loads(result.stdout)
    assert figures["runs"] == 2 and len(figures["startup_s"]) == 2
    assert 0 < figures["startup_min_s"] <= figures["startup_median_s"] < 60
    assert figures["cpu_median_s"] > 0
    assert 0 < figures["passthrough_min_s"] <= figures["passthrough_median_s"] < 60
    assert figures["modules"] > 100  # the gateway, aiohttp, pydantic...
    assert set(figures["phases_ms"]) == {
        "import gateway.cli", "settings", "import gateway.process", "import gateway.app", "create_app",
    }  # fmt: skip
    assert figures["heavy"] == []  # as tests/unit/test_import_hygiene.py requires
    assert figures["import_ms"] > 0
