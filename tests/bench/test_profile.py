"""``python -m bench profile``: the top-frames summary of py-spy's raw output, and one
real profile of the gateway under load (py-spy installed on demand; skipped when it cannot be)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench import frames, profiling, pyspy

RAW = """\
main (app.py:10);loop (app.py:20);handle (h.py:5);parse (p.py:1) 6
main (app.py:10);loop (app.py:21);handle (h.py:7) 2
main (app.py:10);loop (app.py:20);walk (w.py:3);walk (w.py:4);walk (w.py:4) 2
garbage line without a count
"""


def test_self_and_inclusive_shares_of_samples() -> None:
    prof = frames.parse_raw(RAW.splitlines())
    assert prof.total == 10
    assert frames.top(prof.self_samples, prof.total, 3) == [
        (60.0, "parse (p.py)"),
        (20.0, "handle (h.py)"),
        (20.0, "walk (w.py)"),
    ]
    inclusive = dict((f, pct) for pct, f in frames.top(prof.inclusive, prof.total, 10))
    # lines of one function add up; a recursive frame counts once per sample
    assert inclusive == {
        "main (app.py)": 100.0,
        "loop (app.py)": 100.0,
        "handle (h.py)": 80.0,
        "parse (p.py)": 60.0,
        "walk (w.py)": 20.0,
    }
    by_line = frames.parse_raw(RAW.splitlines(), by_line=True)
    assert by_line.inclusive["loop (app.py:20)"] == 8 and by_line.inclusive["loop (app.py:21)"] == 2
    text = frames.format_profile(prof, 2, expected_samples=40)
    assert text.startswith("10 samples with the GIL held (~25% of 40 sampling ticks)")
    assert " 60.0%  parse (p.py)" in text and "100.0%  main (app.py)" in text


def test_record_command_and_missing_binary() -> None:
    cmd = pyspy.record_cmd(Path("/x/py-spy"), 42, 3, 150, Path("/tmp/o.raw"))
    assert cmd[:2] == ["/x/py-spy", "record"]
    for flag, value in (("--pid", "42"), ("--duration", "3"), ("--rate", "150"), ("--format", "raw")):
        assert cmd[cmd.index(flag) + 1] == value
    assert "--gil" in cmd and "--nonblocking" in cmd
    with pytest.raises(pyspy.PySpyUnavailable, match="no py-spy at"):
        pyspy.ensure(Path("/nonexistent/py-spy"))


def test_profile_of_the_gateway_under_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        exe = pyspy.ensure()
    except pyspy.PySpyUnavailable as exc:
        pytest.skip(str(exc))
    raw = tmp_path / "p.raw"
    args = ["--mode", "stream", "--concurrency", "2", "--seconds", "1", "--warmup", "0.3", "--top", "40"]
    args += ["--raw-out", str(raw)]
    code = profiling.main([*args, "--py-spy", str(exe), "--deltas", "5"])
    out, err = capsys.readouterr()
    if code != 0 and "py-spy failed" in err:
        pytest.skip(f"py-spy cannot sample here: {err.strip()}")  # e.g. no ptrace permission
    assert code == 0, err
    assert re.search(r"gateway under load \(stream, c=2\): \d+ req/s, .* 0 errors", out)
    samples = int(out.splitlines()[1].split()[0])
    assert samples > 0 and raw.stat().st_size > 0
    inclusive = out.split("inclusive (anywhere on the stack)")[1]
    assert "(gateway/" in inclusive  # the gateway's own frames are on the sampled stacks
