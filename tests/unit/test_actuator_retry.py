"""The actuator's API-call wrapper: QPS budget, retries with backoff on 429/5xx, not on 4xx."""

from __future__ import annotations

import time
from typing import Any

import pytest
from prometheus_client import REGISTRY

from governor.kube import KubeError
from governor_actuator.actuator import Actuator
from governor_actuator.config import ActuatorSettings


def actuator(**settings: Any) -> Actuator:
    return Actuator(kube=None, settings=ActuatorSettings(allowed_namespaces=["x"], **settings))  # type: ignore[arg-type]


class Flaky:
    def __init__(self, *errors: KubeError) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def errors(code: str) -> float:
    return REGISTRY.get_sample_value("governor_actuator_kube_errors_total", {"code": code}) or 0.0


async def test_retries_429_and_5xx_honouring_retry_after() -> None:
    a = actuator()
    before = errors("429"), errors("503")
    fn = Flaky(
        KubeError(429, "TooManyRequests", "slow down", retry_after=0.5), KubeError(503, "", "")
    )
    t0 = time.monotonic()
    assert await a.call("x", fn) == "ok"
    took = time.monotonic() - t0
    assert fn.calls == 3
    assert took >= 0.5 + 0.4  # Retry-After, then the second backoff step (0.2 * 2)
    assert (errors("429"), errors("503")) == (before[0] + 1, before[1] + 1)


async def test_client_errors_are_not_retried() -> None:
    fn = Flaky(KubeError(404, "NotFound", "gone"))
    with pytest.raises(KubeError, match="404"):
        await actuator().call("x", fn)
    assert fn.calls == 1


async def test_gives_up_after_max_retries() -> None:
    fn = Flaky(*[KubeError(500, "", "boom") for _ in range(10)])
    with pytest.raises(KubeError, match="500"):
        await actuator(max_retries=1).call("x", fn)
    assert fn.calls == 2


async def test_the_budget_paces_calls() -> None:
    a = actuator(qps=20, burst=2)
    t0 = time.monotonic()
    for _ in range(6):
        await a.call("x", Flaky())
    # 2 from the burst, then 4 at 20/s
    assert time.monotonic() - t0 >= 4 / 20 - 0.02
    # side writes have their own budget: they do not wait for the decisions' one
    t1 = time.monotonic()
    await a.call("x", Flaky(), side=True)
    assert time.monotonic() - t1 < 0.05
