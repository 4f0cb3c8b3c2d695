"""Smoke test of ``python -m bench.failover_cache``: 6 Claude-Code-shaped sessions of 6 turns over
two first-party emulators, the primary down for rounds 3-4. Checks the report is complete, that no
request was lost, that with affinity every session moved exactly once (and per-request failover
twice: out and back), and that affinity's extra cost is within 1.2x one re-write per moved session.
No time is measured; the per-request comparison's 3x target needs the full run's longer outage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from bench import failover_cache

pytestmark = pytest.mark.timeout(300)
SESSIONS, TURNS = 6, 6


def test_small_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "failover.json"
    code = failover_cache.main(["--sessions", str(SESSIONS), "--turns", str(TURNS), "--json", str(out)])
    printed = capsys.readouterr().out
    assert code in (0, 1), printed
    report: dict[str, Any] = orjson.loads(out.read_bytes())
    runs = report["runs"]
    assert set(runs) == {"affinity", "per_request", "no_outage"}
    assert report["passed"]["no_request_lost"]
    assert runs["no_outage"]["moves"] == 0 and set(runs["no_outage"]["by_upstream"]) == {"primary"}
    assert runs["affinity"]["moves"] == SESSIONS  # once each, and they stay
    assert runs["affinity"]["by_upstream"]["secondary"]["requests"] == SESSIONS * (TURNS - 2)
    assert runs["per_request"]["moves"] == 2 * SESSIONS  # out at the outage, back after it
    assert runs["per_request"]["by_upstream"]["secondary"]["requests"] == SESSIONS * 2
    assert report["minimum_increase_usd"] > 0
    assert report["passed"]["affinity_over_minimum"], report["affinity_over_minimum"]
