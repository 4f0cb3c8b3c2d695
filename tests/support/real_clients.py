"""The captured real-client requests (``tests/fixtures/real-clients/``): one loaded by name, and
its headers ready to replay."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from emulators import DEFAULT_API_KEY

REAL_CLIENTS = Path(__file__).resolve().parents[1] / "fixtures" / "real-clients"
HOP_HEADERS = frozenset({"host", "content-length", "connection", "accept-encoding"})
"""Headers a replay does not send as captured (the HTTP client sets its own)."""


def load_real_client_fixture(name: str) -> dict[str, Any]:
    """A captured request (``headers`` as [name, value] pairs, ``body``, ``raw_path``) by file stem."""
    data: dict[str, Any] = json.loads((REAL_CLIENTS / f"{name}.json").read_text())
    return data


def replay_headers(fixture: dict[str, Any], api_key: str = DEFAULT_API_KEY) -> list[tuple[str, str]]:
    """The fixture's headers in order, minus hop-by-hop ones, with ``api_key`` (by default the
    emulator's) as ``x-api-key``."""
    skip = HOP_HEADERS | {"x-api-key", "authorization"}
    headers = [(k, v) for k, v in fixture["headers"] if k.lower() not in skip]
    headers.append(("x-api-key", api_key))
    return headers
