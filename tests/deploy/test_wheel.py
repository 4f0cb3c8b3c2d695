"""The wheel ``pip install .`` builds: the gateway and the loop, and what they need at run time.

Built from a copy of the checkout (the build writes ``build/`` and ``*.egg-info`` next to the
sources) with the installed build backend (``--no-build-isolation``: no download), then read as
a zip: its files and its metadata's requirements.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser

import pytest
from packaging.requirements import Requirement

from tests.support.import_graph import REPO

SKIPPED = shutil.ignore_patterns(".*", "__pycache__", "build", "*.egg-info", "*.json", "node_modules")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    shutil.copytree(REPO, source, ignore=SKIPPED)
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
         "--wheel-dir", str(work / "dist"), str(source)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    (built,) = (work / "dist").glob("switchyard-*.whl")
    return zipfile.ZipFile(built)


def _metadata(wheel: zipfile.ZipFile) -> list[Requirement]:
    (name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    message = Parser().parsestr(wheel.read(name).decode())
    return [Requirement(value) for value in message.get_all("Requires-Dist") or []]


def test_the_wheel_holds_the_gateway_and_the_loop_only(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"gateway", "loop", "switchyard-0.1.0.dist-info"}
    assert "gateway/server.py" in names and "loop/query.py" in names and "gateway/py.typed" in names
    assert not [n for n in names if n.startswith(("emulators/", "bench/", "tests/"))]
    assert not [n for n in names if "emulat" in n or "bench" in n]


def test_the_base_requirements_leave_out_the_sdk_and_the_tools(wheel: zipfile.ZipFile) -> None:
    requirements = _metadata(wheel)
    base = {r.name for r in requirements if "extra" not in str(r.marker)}
    # docstring-parser: loop's @tool reads parameter descriptions from the docstring at run time;
    # PyYAML: the fleet policy file (GATEWAY_POLICY_FILE) may be YAML
    assert base == {
        "aiohttp",
        "orjson",
        "prometheus-client",
        "pydantic",
        "google-re2",
        "docstring-parser",
        "uvloop",
        "PyYAML",
    }

    def extra(name: str) -> set[str]:
        return {
            r.name
            for r in requirements
            if r.marker is not None and "extra" in str(r.marker) and r.marker.evaluate({"extra": name})
        }

    assert extra("sdk") == {"anthropic"}  # loop's SdkModelCaller
    assert {"anthropic", "botocore", "cryptography"} <= extra("emulators")  # emulators/, bench/
    assert extra("bedrock") == {"boto3", "botocore"}
