"""Waiting in async tests for a condition that other tasks or processes make true."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


async def wait_for(cond: Callable[[], bool], within_s: float, what: str) -> None:
    """Return once `cond()` holds; fail naming `what` after `within_s`."""
    deadline = time.monotonic() + within_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within_s}s waiting for {what}")
        await asyncio.sleep(0.05)
