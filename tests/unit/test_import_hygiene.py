"""An unused provider's SDK is never imported: the first-party gateway loads no cloud SDK."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from gateway.config import Settings
from gateway.app import create_app
settings = Settings.from_environ({"GATEWAY_API_KEYS": "k", "ANTHROPIC_API_KEY": "u"})
app = create_app(settings)
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("botocore", "boto3", "google", "azure"))
print(",".join(heavy))
"""


def test_first_party_gateway_imports_no_cloud_sdk() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == ""
