"""A local HTTP server for tests that need a real one to talk to (aiohttp's)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from tests.support.procs import free_port


@contextlib.asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    """`app` served on a free port of 127.0.0.1 while the block runs; its base URL."""
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
