"""Without the ``sdk`` extra (no ``anthropic``), ``switchyard agent --base-url`` says in one line
which extra to install, and the modules that use the SDK import it only when they run.

Each case runs in a fresh interpreter whose import system refuses ``anthropic`` as an absent
package does (``ModuleNotFoundError`` naming it), whatever the shared venv has installed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support.import_graph import REPO

WITHOUT_SDK = textwrap.dedent(
    """
    import importlib.abc, sys

    class NoSdk(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] == "anthropic":
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NoSdk())
    """
)
HINT = "pip install 'switchyard[sdk]'"


def _without_sdk(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_SDK + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )


def test_agent_with_base_url_names_the_extra_in_one_line(tmp_path: Path) -> None:
    result = _without_sdk(
        f"""
        from gateway.cli import main
        sys.exit(main(["agent", "task", "--workspace", {str(tmp_path)!r},
                       "--base-url", "http://127.0.0.1:1", "--api-key", "sk-test"]))
        """
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and HINT in lines[0] and lines[0].startswith("switchyard agent: --base-url:"), (
        lines
    )


def test_the_demo_and_the_callers_import_without_the_sdk_and_the_sdk_caller_names_the_extra() -> None:
    result = _without_sdk(
        """
        import loop.demo
        from loop.callers import ProviderModelCaller
        try:
            from loop.callers import SdkModelCaller
        except ModuleNotFoundError as exc:
            print(exc.name, "|", exc)
        print(sorted(m for m in sys.modules if m.partition(".")[0] == "anthropic"))
        """
    )
    assert result.returncode == 0, result.stderr[-3000:]
    error, loaded = result.stdout.splitlines()
    assert error.startswith("anthropic | ") and HINT in error
    assert loaded == "[]"


def test_the_probe_blocks_the_sdk_the_way_an_absent_package_does() -> None:
    """The interpreter above really has no SDK: a plain import fails there, and succeeds here."""
    result = _without_sdk("import anthropic")
    assert result.returncode == 1 and "ModuleNotFoundError: No module named 'anthropic'" in result.stderr
    assert subprocess.run([sys.executable, "-c", "import anthropic"], cwd=REPO, timeout=120).returncode == 0
