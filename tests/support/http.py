"""A local HTTP server for tests that need a real one to talk to (aiohttp's)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@contextlib.asynccontextmanager
async def serving(app: web.Application | Mapping[str, Handler]) -> AsyncIterator[str]:
    """`app` served on a free port of 127.0.0.1 while the block runs; its base URL. A mapping
    stands for an app that answers GET on each path with its handler."""
    if not isinstance(app, web.Application):
        routes, app = app, web.Application()
        for path, handler in routes.items():
            app.router.add_get(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    # Port 0: the kernel picks a free port as it binds (a port found free first may be taken
    # before the bind).
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()
