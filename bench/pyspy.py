"""py-spy, the sampling profiler behind ``python -m bench profile``, installed on demand.

py-spy is not a project dependency: the first ``profile`` run installs the pinned release from
PyPI into its own virtualenv under ``~/.cache/switchyard/py-spy/<version>`` (the way
``tests/support/mitmproxy.py`` installs mitmproxy) and reuses it afterwards. When that is
impossible (no registry, no pip) :func:`ensure` raises :class:`PySpyUnavailable` with one line
saying why.
"""

from __future__ import annotations

import subprocess
import venv
from pathlib import Path

PACKAGE = "py-spy"
PINNED = "0.4.3"
INSTALL_TIMEOUT_S = 600.0


class PySpyUnavailable(RuntimeError):
    """py-spy could not be found or installed (the message is one line)."""


def cache_root() -> Path:
    return Path.home() / ".cache" / "switchyard" / "py-spy"


def binary(version: str = PINNED) -> Path:
    return cache_root() / version / "bin" / "py-spy"


def last_line(text: str | bytes | None) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][-200:] if lines else ""


def install(version: str = PINNED) -> Path:
    """Install py-spy ``version`` into its own virtualenv in the cache (if missing); its binary."""
    found = binary(version)
    if found.exists():
        return found
    prefix = cache_root() / version
    try:
        venv.EnvBuilder(with_pip=True, clear=True).create(prefix)
        subprocess.run(
            [
                str(prefix / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                f"{PACKAGE}=={version}",
            ],
            capture_output=True,
            timeout=INSTALL_TIMEOUT_S,
            check=True,
        )
    except subprocess.CalledProcessError as exc:
        why = last_line(exc.stderr) or f"pip exited with status {exc.returncode}"
        raise PySpyUnavailable(f"cannot install {PACKAGE}=={version} into {prefix}: {why}") from None
    except (OSError, subprocess.SubprocessError) as exc:
        raise PySpyUnavailable(f"cannot install {PACKAGE}=={version} into {prefix}: {exc}") from None
    if not found.exists():
        raise PySpyUnavailable(f"pip installed {PACKAGE}=={version} but {found} is missing")
    return found


def ensure(explicit: Path | None = None, version: str = PINNED) -> Path:
    """``explicit`` if given (it must exist), else the cached install, installing it if needed."""
    if explicit is not None:
        if not explicit.exists():
            raise PySpyUnavailable(f"no py-spy at {explicit}")
        return explicit
    return install(version)


def record_cmd(exe: Path, pid: int, seconds: int, rate: int, out: Path) -> list[str]:
    """``py-spy record`` of ``pid`` for ``seconds``: raw (collapsed stacks) format, only samples of
    the thread holding the GIL, without pausing the process for each sample."""
    return [
        str(exe), "record",
        "--pid", str(pid),
        "--duration", str(seconds),
        "--rate", str(rate),
        "--format", "raw",
        "--output", str(out),
        "--gil",
        "--nonblocking",
    ]  # fmt: skip
