"""``python -m tests.support.asyncio_gateway``: the gateway on asyncio's own event loop, not uvloop.

``switchyard serve`` runs on uvloop, where libuv absorbs accept()'s ``EMFILE`` itself; on asyncio's
loop every failed accept reaches the loop's exception handler (an ERROR with a traceback by
default). This entry point serves ``create_app`` through ``gateway.process.running`` like
``serve`` does, so tests can see what the gateway makes of that. Settings come from the
environment, as for ``switchyard serve``.
"""

from __future__ import annotations

import asyncio
import os

from gateway.app import create_app
from gateway.config import Settings
from gateway.logging_setup import configure_logging
from gateway.process import running


async def main() -> None:
    settings = Settings.from_environ(os.environ, serving=True)
    async with running(create_app(settings), settings.listener.host, settings.listener.port):
        await asyncio.Event().wait()


if __name__ == "__main__":
    configure_logging("INFO")
    asyncio.run(main())
