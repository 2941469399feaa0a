"""Waiting in async tests for a condition that other tasks or processes make true.

Two shapes: `wait_for` polls a condition until it holds (its value is returned), `eventually`
runs a check until it stops failing (caches and configs that settle asynchronously: an RBAC
rule, a topic config, a CRD). Either may be a plain or an async callable.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def _call(fn: Callable[[], Any]) -> Any:
    got = fn()
    return await got if inspect.isawaitable(got) else got


async def wait_for(
    cond: Callable[[], Any], within_s: float = 20.0, what: str = "", interval: float = 0.05
) -> Any:
    """Return `cond()`'s first truthy value; fail naming `what` after `within_s`."""
    deadline = time.monotonic() + within_s
    while True:
        got = await _call(cond)
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within_s}s waiting for {what or cond}")
        await asyncio.sleep(interval)


async def eventually(
    check: Callable[[], T | Awaitable[T]],
    within_s: float = 20.0,
    retry_on: tuple[type[BaseException], ...] = (AssertionError,),
    interval: float = 0.2,
) -> T:
    """Return `check()`'s value once it runs without raising one of `retry_on`; after
    `within_s` its last error is raised as it was."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            result: T = await _call(check)
            return result
        except retry_on:
            if time.monotonic() > deadline:
                raise
        await asyncio.sleep(interval)
