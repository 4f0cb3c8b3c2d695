"""One structured JSON log line per request, on the ``switchyard.access`` logger.

Never contains prompt or completion content, nor any credential: only ids, routing facts,
durations and usage.
"""

from __future__ import annotations

import logging

import orjson

access_log = logging.getLogger("switchyard.access")


def log_request(**fields: object) -> None:
    if access_log.isEnabledFor(logging.INFO):
        access_log.info(orjson.dumps({"event": "request", **fields}).decode())
