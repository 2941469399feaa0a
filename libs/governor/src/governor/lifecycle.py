"""A service process's life: start, run until the loop ends by itself or SIGTERM/SIGINT asks it
to, let it finish what it has in hand, stop."""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Protocol


class Service(Protocol):
    async def start(self) -> None: ...

    async def run(self) -> None:
        """The service's loop; returns once `request_stop()` was called (or raises)."""

    def request_stop(self) -> None:
        """Ask `run()` to return after the work in hand."""

    async def stop(self) -> None:
        """Close everything; called whether or not `start()` got through."""


async def serve(service: Service, log: logging.Logger, grace_s: float = 30.0) -> None:
    """Run `service` until its loop ends (its error is raised) or a signal comes; then give
    `run()` `grace_s` to finish the work in hand, and stop the service either way."""
    loop = asyncio.get_running_loop()
    signalled = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, signalled.set)
    waiter = asyncio.create_task(signalled.wait())
    try:
        await service.start()
        runner = asyncio.create_task(service.run())
        done, _ = await asyncio.wait({runner, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if runner in done:
            runner.result()  # the loop ended by itself: raise what ended it
        log.info("signal received: finishing the work in hand")
        service.request_stop()
        try:
            await asyncio.wait_for(runner, timeout=grace_s)
        except TimeoutError:
            log.warning("the work in hand did not finish within %gs", grace_s)
    finally:
        waiter.cancel()
        await service.stop()
