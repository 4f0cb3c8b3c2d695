"""Calling the model caller safely: its stream, closed when we stop, and an exception it raises
turned into an ``error`` event (``client_error``), so a failing caller ends the run (or the
summarisation call) as a model error instead of an exception."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator

from loop.callers.errors import error_event
from loop.deps import ModelCaller, ModelStreamItem
from loop.request import ModelRequest

log = logging.getLogger("switchyard.loop")


async def guarded(caller: ModelCaller, request: ModelRequest) -> AsyncGenerator[ModelStreamItem, None]:
    stream = caller(request)
    try:
        async for item in stream:
            yield item
    except Exception as exc:
        log.exception("model caller failed (request %s)", request.request_id)
        yield error_event("client_error", f"{type(exc).__name__}: {exc}")
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()
