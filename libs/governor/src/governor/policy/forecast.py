"""Predictive headroom: an online quantile of the load's short-horizon growth.

The method ("a quantile of short-horizon growth", docs/simulation.md says why it beat the
alternatives tried): the load is kept in replica units (what the metric asks for at exactly its
target, so the policy's target is the unit), one sample per decision step. Every step adds one
growth sample: the highest load of the next horizon H over the load H ago, both plus half a
replica (so an idle workload's noise is not an infinite ratio). The samples go into a fixed
log-spaced histogram with exponential forgetting (`half_life_seconds`). The forecast of the
load over [now, now + H] at quantile p is the load now times the growth quantile p:

    upper(p) = (load + ½) × growth_p − ½

The histogram of growth IS the error distribution of the persistence forecast "the load stays",
so the headroom is a quantile of the forecaster's own recent errors: a volatile series gets
more margin, a regular one less, and a constant one none (its growth is exactly 1).

Cost: O(1) per evaluation (the quantiles are read from the state), O(BINS + H/step) once per
decision step; the state is under 2 KB (AGES × BINS float32, at most MAX_STEPS + 1 loads).
"""

from __future__ import annotations

import array
import bisect
import itertools
import math

import msgspec

BINS = 17  # bin 0: no growth (ratio ≤ 1); bins 1..16: log-spaced up to MAX_RATIO
MAX_RATIO = 4.0  # growth beyond this is counted as this (the rate limits bind before it)
MAX_STEPS = 32  # the longest horizon in decision steps the state keeps loads for
AGES = 24  # histograms by steps since the load last changed (the last one: that many or more)
HALF = 0.5  # the replica added to both sides of a growth ratio
_LOG_MAX = math.log(MAX_RATIO)
_EDGES = (1.0, *(MAX_RATIO ** (i / (BINS - 1)) for i in range(1, BINS)))  # upper edges
_RENORMALIZE_AT = 1e12
_EMPTY = array.array("f", bytes(4 * BINS * AGES)).tobytes()


class ForecastState(msgspec.Struct, array_like=True, frozen=True):
    """One metric's forecaster. `loads`/`ages`: the last samples (replica units) and the steps
    since the load had last changed at each, oldest first; `counts`: AGES growth histograms of
    BINS float32 weights (packed), in weights that grow with time (`weight` is the next sample's),
    so forgetting costs nothing per step; `up`/`down`: the growth quantiles for the current age."""

    at: float = -math.inf
    loads: tuple[float, ...] = ()
    ages: tuple[int, ...] = ()
    counts: bytes = b""
    weight: float = 1.0
    up: float = 1.0
    down: float = 1.0


def horizon_steps(horizon: float, step: float) -> int:
    """Decision steps the horizon spans (at least one, at most MAX_STEPS)."""
    return max(1, min(MAX_STEPS, math.ceil(horizon / step - 1e-9)))


def growth_bin(ratio: float) -> int:
    if ratio <= 1.0:
        return 0
    return min(BINS - 1, 1 + int(math.log(ratio) / _LOG_MAX * (BINS - 1)))


def quantile(cumulative: list[float], q: float) -> float:
    """The upper edge of the bin where the cumulative weight reaches q (conservative)."""
    total = cumulative[-1] if cumulative else 0.0
    if total <= 0:
        return 1.0
    i = bisect.bisect_left(cumulative, q * total)
    return MAX_RATIO if i >= BINS else _EDGES[i]


def _changed(before: float, now: float) -> bool:
    return abs(now - before) > 1e-9 * max(1.0, abs(now))


def observe(
    state: ForecastState,
    load: float,
    now: float,
    step: float,
    steps: int,
    up_q: float,
    down_q: float,
    half_life: float,
) -> ForecastState:
    """The state after seeing `load` (replica units) at `now`: one sample per decision step.

    Growth is kept apart by the load's age (steps since it last changed) at the base sample,
    so a load that only ever changes at fixed intervals (a metric sampled every 5 minutes)
    learns that no change comes right after one, and gets its headroom only where one can:
    a load that changes all the time has age 0 throughout, one histogram, the plain quantile.
    """
    if now < state.at + step * 0.999:
        return state  # the decider evaluates more often than once a step: same bucket
    load = max(load, 0.0)
    age = 0 if not state.loads or _changed(state.loads[-1], load) else state.ages[-1] + 1
    loads = (*state.loads, load)[-(steps + 1) :]
    ages = (*state.ages, age)[-(steps + 1) :]
    counts = array.array("f", state.counts or _EMPTY)
    weight = state.weight
    if len(loads) > steps:
        base, ahead = loads[0], max(loads[1:])
        at = min(ages[0], AGES - 1) * BINS + growth_bin((ahead + HALF) / (base + HALF))
        counts[at] += weight
        weight *= 2.0 ** (step / half_life)
        if weight > _RENORMALIZE_AT:
            counts = array.array("f", (c / weight for c in counts))
            weight = 1.0
    i = min(age, AGES - 1) * BINS
    cumulative = list(itertools.accumulate(counts[i : i + BINS]))
    return ForecastState(
        at=now,
        loads=loads,
        ages=ages,
        counts=counts.tobytes(),
        weight=weight,
        up=quantile(cumulative, up_q),
        down=quantile(cumulative, down_q),
    )


def upper(base: float, growth: float) -> float:
    """The forecast's bound of the load over the horizon (replica units), never below `base`."""
    return max(base, (base + HALF) * growth - HALF)


def replicas_for(load: float) -> int:
    """The replicas that serve `load` (replica units) at the target: ceil, with float slack."""
    return max(0, math.ceil(load - 1e-9))
