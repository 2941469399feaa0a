"""Pacing of the actuator's API requests: a token bucket and the retry backoff (`now` passed in)."""

from __future__ import annotations

import math


class TokenBucket:
    """A QPS budget: `rate` requests per second, bursts up to `burst`. `now` is passed in."""

    def __init__(self, rate: float, burst: int, now: float) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be > 0 and burst >= 1")
        self.rate, self.burst = rate, float(burst)
        self._tokens = float(burst)
        self._at = now

    def reserve(self, now: float) -> float:
        """Take one token; returns how long to wait before using it (0: go now)."""
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate


RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


def backoff_seconds(
    attempt: int, retry_after: float | None = None, base: float = 0.2, cap: float = 10.0
) -> float:
    """Delay before retry `attempt` (1-based): exponential, capped, at least Retry-After."""
    delay = min(cap, base * math.pow(2, max(0, attempt - 1)))
    if retry_after is not None and retry_after > 0:
        delay = max(delay, min(retry_after, cap * 3))
    return delay
