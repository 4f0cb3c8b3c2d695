"""The ``anthropic-version`` / ``anthropic_version`` values the emulators accept.

``../shared/design/providers.md`` line 5 (the version warning): the SDK (2.14.0) sends
``anthropic-version: 2026-10-21`` and the same string as the Bedrock and Vertex body
``anthropic_version``, while the public docs say ``2023-06-01`` (first party),
``bedrock-2023-05-31`` and ``vertex-2023-10-16``; an emulator accepts the documented value **and**
the SDK's, read at run time. It is read from what the SDK puts on the wire (the public client's
``default_headers``), not from the SDK's private ``_constants`` module.
"""

from __future__ import annotations

import functools
from typing import Final

import anthropic

FIRST_PARTY_VERSION: Final = "2023-06-01"
BEDROCK_VERSION: Final = "bedrock-2023-05-31"
VERTEX_VERSION: Final = "vertex-2023-10-16"


@functools.cache
def sdk_api_version() -> str:
    """The ``anthropic-version`` header the installed SDK sends on every request."""
    client = anthropic.Anthropic(api_key="unused", base_url="http://127.0.0.1:9")
    try:
        value = client.default_headers.get("anthropic-version")
    finally:
        client.close()
    if not isinstance(value, str):
        raise RuntimeError("the installed anthropic SDK sends no anthropic-version header")
    return value


def accepted(documented: str) -> frozenset[str]:
    """``documented`` and the installed SDK's version."""
    return frozenset({documented, sdk_api_version()})
