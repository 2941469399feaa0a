"""governor.retry: the backoff schedule, the deadline, what is retried and what is not."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tenacity import RetryError

from governor.retry import Backoff, delays, retrying

log = logging.getLogger("test.retry")


def test_the_schedule_doubles_to_its_cap() -> None:
    assert list(delays(0.1, 5.0, 8)) == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0])
    assert list(delays(0.5, 30.0, 3)) == [0.5, 1.0, 2.0]


@given(
    first=st.floats(0.01, 10),
    cap=st.floats(0.01, 60),
    n=st.integers(1, 40),
    jitter=st.floats(0, 0.5),
    draw=st.floats(0, 1),
)
def test_a_wait_stays_within_its_bounds(
    first: float, cap: float, n: int, jitter: float, draw: float
) -> None:
    base = list(delays(first, cap, n))
    assert all(x <= y for x, y in itertools.pairwise(base))  # never shrinks
    assert all(min(first, cap) <= w <= cap for w in base)
    # jitter: a factor in [1 - jitter, 1 + jitter] of the wait, whatever the draw
    b = Backoff(first, cap, jitter=jitter, rng=lambda lo, hi: lo + (hi - lo) * draw)
    w = b.jittered(n)
    assert base[-1] * (1 - jitter) - 1e-9 <= w <= base[-1] * (1 + jitter) + 1e-9


def test_it_retries_until_it_works_and_logs_each_retry(caplog: pytest.LogCaptureFixture) -> None:
    calls = []

    async def go() -> int:
        async for attempt in retrying(on=OSError, first_s=0.01, max_s=0.02, log=log, what="x"):
            with attempt:
                calls.append(1)
                if len(calls) < 3:
                    raise OSError("down")
                return len(calls)
        raise AssertionError("unreachable")

    with caplog.at_level(logging.WARNING, "test.retry"):
        assert asyncio.run(go()) == 3
    assert [r.getMessage() for r in caplog.records] == [
        "x failed (down); retrying in 0.0s",
        "x failed (down); retrying in 0.0s",
    ]


def test_another_error_is_not_retried() -> None:
    async def go() -> None:
        async for attempt in retrying(on=OSError, first_s=0.01, max_s=0.02, log=log, what="x"):
            with attempt:
                raise ValueError("bug")

    with pytest.raises(ValueError, match="bug"):
        asyncio.run(go())


def test_it_stops_at_the_deadline_without_sleeping_past_it() -> None:
    async def go() -> None:
        deadline = time.monotonic() + 0.3
        async for attempt in retrying(
            on=OSError, first_s=0.05, max_s=10.0, log=log, what="x", deadline=deadline
        ):
            with attempt:
                raise OSError("down")

    t0 = time.monotonic()
    with pytest.raises(RetryError) as e:
        asyncio.run(go())
    assert isinstance(e.value.last_attempt.exception(), OSError)
    assert 0.3 <= time.monotonic() - t0 < 5.0


def test_one_call_returns_its_first_success_or_raises_retry_error_at_the_deadline() -> None:
    results = iter([OSError("down"), 42])

    async def flaky() -> int:
        r = next(results)
        if isinstance(r, Exception):
            raise r
        assert isinstance(r, int)
        return r

    async def never() -> int:
        raise OSError("down")

    kw = {"on": OSError, "first_s": 0.01, "max_s": 0.02, "log": log, "what": "x"}
    assert asyncio.run(retrying(**kw)(flaky)) == 42  # type: ignore[arg-type]
    with pytest.raises(RetryError):
        asyncio.run(retrying(deadline=time.monotonic() + 0.1, **kw)(never))  # type: ignore[arg-type]
