"""A local HTTP server for tests that need a real one to talk to (aiohttp's)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from aiohttp import web


@contextlib.asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    """`app` served on a free port of 127.0.0.1 while the block runs; its base URL."""
    runner = web.AppRunner(app)
    await runner.setup()
    # Port 0: the kernel picks a free port as it binds (a port found free first may be taken
    # before the bind).
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()
