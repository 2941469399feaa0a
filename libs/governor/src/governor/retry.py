"""Retries with exponential backoff, in one place, on tenacity.

Every shell loop that waits out a failure (a broker not up yet, a dead letter not acked, a watch
that broke, a publish that failed) retries through `retrying(...)`: an `AsyncRetrying` whose
wait doubles from `first_s` up to `max_s` (optionally jittered), never sleeps past `deadline`
and stops there, and logs each retry with what failed and how long it waits. The pure schedule
(`delays`) is what the tests pin down.

    async for attempt in retrying(on=KafkaError, first_s=0.2, max_s=5.0, log=log, what="x"):
        with attempt:
            await send()

    value = await retrying(...)(fetch)   # the same, for one call: its value, or RetryError
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_never,
)
from tenacity.stop import stop_base
from tenacity.wait import wait_base

__all__ = ["Backoff", "Deadline", "delays", "retrying"]

ExcTypes = type[BaseException] | tuple[type[BaseException], ...]


class Backoff(wait_base):
    """`first_s` doubling (`factor`) per failed attempt up to `max_s`, times a random factor in
    [1 - jitter, 1 + jitter] (so that many clients do not retry in step); cut at `deadline`."""

    def __init__(
        self,
        first_s: float,
        max_s: float,
        *,
        factor: float = 2.0,
        jitter: float = 0.0,
        deadline: float | None = None,
        rng: Callable[[float, float], float] = random.uniform,
    ) -> None:
        self.first_s, self.max_s, self.factor = first_s, max_s, factor
        self.jitter, self.deadline, self.rng = jitter, deadline, rng

    def base(self, attempt: int) -> float:
        """The wait after failed attempt number `attempt` (1-based), before jitter."""
        return float(min(self.first_s * self.factor ** (attempt - 1), self.max_s))

    def jittered(self, attempt: int) -> float:
        """The wait after failed attempt `attempt`, jittered (for loops that are not tenacity's:
        a watch whose failures each need their own handling)."""
        wait = self.base(attempt)
        if self.jitter:
            wait *= self.rng(1 - self.jitter, 1 + self.jitter)
        return wait

    def __call__(self, retry_state: RetryCallState) -> float:
        wait = self.jittered(retry_state.attempt_number)
        if self.deadline is not None:
            wait = max(0.0, min(wait, self.deadline - time.monotonic()))
        return wait


class Deadline(stop_base):
    """Stop once the monotonic clock reached `deadline`."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline

    def __call__(self, retry_state: RetryCallState) -> bool:
        return time.monotonic() >= self.deadline


def delays(first_s: float, max_s: float, n: int, factor: float = 2.0) -> Iterator[float]:
    """The first `n` waits of a `Backoff` without jitter or deadline."""
    b = Backoff(first_s, max_s, factor=factor)
    return (b.base(i) for i in range(1, n + 1))


def retrying(
    *,
    on: ExcTypes,
    first_s: float,
    max_s: float,
    log: logging.Logger,
    what: str | Callable[[], str],
    deadline: float | None = None,
    jitter: float = 0.0,
    level: int = logging.WARNING,
) -> AsyncRetrying:
    """Retry on exceptions of `on` with `Backoff(first_s, max_s)`; forever, or until `deadline`
    (then tenacity raises `RetryError` carrying the last attempt). Each retry logs
    `<what> failed (<error>); retrying in <s>s` at `level`."""

    def before_sleep(state: RetryCallState) -> None:
        err = state.outcome.exception() if state.outcome is not None else None
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        name = what() if callable(what) else what
        log.log(level, "%s failed (%s); retrying in %.1fs", name, err, wait)

    return AsyncRetrying(
        retry=retry_if_exception_type(on),
        wait=Backoff(first_s, max_s, jitter=jitter, deadline=deadline),
        stop=stop_never if deadline is None else Deadline(deadline),
        before_sleep=before_sleep,
    )
