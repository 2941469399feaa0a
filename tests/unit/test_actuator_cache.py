"""The actuator's TTL cache: one load for concurrent misses, refresh-ahead, a hard TTL."""

from __future__ import annotations

import asyncio

import pytest

from governor_actuator.actuator import TtlCache


class Loader:
    def __init__(self, delay: float = 0.0) -> None:
        self.calls = 0
        self.delay = delay
        self.fail = False

    async def __call__(self) -> int:
        self.calls += 1
        await asyncio.sleep(self.delay)
        if self.fail:
            raise RuntimeError("boom")
        return self.calls


async def test_concurrent_misses_share_one_load() -> None:
    cache: TtlCache[int] = TtlCache(ttl=10)
    load = Loader(delay=0.05)
    values = await asyncio.gather(*(cache.get("k", load) for _ in range(20)))
    assert values == [1] * 20 and load.calls == 1
    assert await cache.get("k", load) == 1 and load.calls == 1


async def test_refresh_ahead_and_hard_ttl() -> None:
    cache: TtlCache[int] = TtlCache(ttl=0.2)
    load = Loader()
    assert await cache.get("k", load) == 1
    await asyncio.sleep(0.12)  # past half the TTL: the old value now, a reload behind it
    assert await cache.get("k", load) == 1
    await asyncio.sleep(0.02)
    assert load.calls == 2 and await cache.get("k", load) == 2
    await asyncio.sleep(0.25)  # past the TTL: waited for
    assert await cache.get("k", load) == 3


async def test_a_failed_refresh_is_not_served_later() -> None:
    cache: TtlCache[int] = TtlCache(ttl=0.2)
    load = Loader()
    assert await cache.get("k", load) == 1
    await asyncio.sleep(0.12)
    load.fail = True
    assert await cache.get("k", load) == 1  # still fresh enough; the refresh fails behind it
    await asyncio.sleep(0.02)
    with pytest.raises(RuntimeError, match="boom"):
        await cache.get("k", load)
    load.fail = False
    assert await cache.get("k", load) == 4
