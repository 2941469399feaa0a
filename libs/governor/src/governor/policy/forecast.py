"""Predictive headroom: an online quantile of the load's short-horizon growth.

The method ("a quantile of short-horizon growth", docs/simulation.md says why it beat the
alternatives tried): the load is kept in replica units (what the metric asks for at exactly its
target, so the policy's target is the unit), one sample per decision step. Every step adds one
growth sample: the highest load of the next horizon H over the load H ago, both plus half a
replica (so an idle workload's noise is not an infinite ratio). The samples go into a fixed
log-spaced histogram (its first bin split finer, see BINS) with exponential forgetting
(`half_life_seconds`). The forecast of the load over [now, now + H] at quantile p is the load
now times the growth quantile p:

    upper(p) = (load + ½) × growth_p − ½

The histogram of growth IS the error distribution of the persistence forecast "the load stays",
so the headroom is a quantile of the forecaster's own recent errors: a volatile series gets
more margin, a regular one less, and a constant one none (its growth is exactly 1).

Cost: O(1) per evaluation (the quantiles are read from the state), and once per decision step
the histogram's update, O(H/step) for the horizon's loads and each quantile searched from the
last step's bin (`quantile_near`: two sums in C, then the bins it moved; no cumulative list;
none at all from the top bin, where a spiky load's upper quantiles stay);
the state is a few hundred bytes (BINS floats, at most MAX_STEPS + 1 loads).
"""

from __future__ import annotations

import bisect
import math
from itertools import accumulate
from typing import Final

import msgspec

# Bin 0: no growth (ratio ≤ 1). Then LOG_BINS log-spaced bins up to MAX_RATIO, the first of
# them (up to 4.4 %) split in FIRST_SPLIT: a quantile reads as its bin's upper edge, and a
# smooth series that grows at all in a quarter of its steps read as +4.4 % (a memory level
# stepping ~10 % then flapped at peak/20, 25 events to HPA's 3); the split takes it to 1.45 %
# where it matters, and leaves the wider bins, whose rounding up is the noisy series' margin
# (twice finer everywhere cost violations there: docs/simulation.md).
LOG_BINS: Final = 32
FIRST_SPLIT: Final = 3
BINS: Final = LOG_BINS + FIRST_SPLIT  # 35
MAX_RATIO: Final = 4.0  # growth beyond this is counted as this (the rate limits bind before it)
MAX_STEPS: Final = 32  # the longest horizon in decision steps the state keeps loads for
HALF: Final = 0.5  # the replica added to both sides of a growth ratio
_LOG_MAX: Final = math.log(MAX_RATIO)
# The upper edge of each bin.
EDGES: Final[tuple[float, ...]] = (
    1.0,
    *[MAX_RATIO ** (j / (FIRST_SPLIT * LOG_BINS)) for j in range(1, FIRST_SPLIT)],
    *[MAX_RATIO ** (i / LOG_BINS) for i in range(1, LOG_BINS + 1)],
)
_RENORMALIZE_AT: Final = 1e12
# A load below this fraction of its recent burst level and below IDLE replicas is between
# bursts (an idle gap of a bursty or scale-to-zero load): growth and the scale-down gate use
# the level there. Both conditions, so a smooth trend down (it falls slower, and stays busy) is
# as before: measured on the nine smoother traces of docs/simulation.md.
BURST_COLLAPSE: Final = 0.25
IDLE: Final = 1.0


class ForecastState(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """One metric's forecaster. `loads`: the last samples (replica units), oldest first; `counts`:
    the growth histogram in weights that grow with time (`weight` is the next sample's), so
    forgetting costs nothing per step; `up`/`down`: the growth quantiles as of the last sample;
    `level`: the recent burst level (a peak that decays, see `observe`), `levels` its last
    values, aligned with `loads`. `gc=False`: floats and tuples of floats, never a cycle, so the
    cyclic collector need not walk one per workload."""

    at: float = -math.inf
    loads: tuple[float, ...] = ()
    counts: tuple[float, ...] = ()
    weight: float = 1.0
    total: float = 0.0
    up: float = 1.0
    down: float = 1.0
    level: float = 0.0
    levels: tuple[float, ...] = ()


def horizon_steps(horizon: float, step: float) -> int:
    """Decision steps the horizon spans (at least one, at most MAX_STEPS)."""
    return max(1, min(MAX_STEPS, math.ceil(horizon / step - 1e-9)))


def quantile(cumulative: list[float], q: float) -> float:
    """The upper edge of the bin where the cumulative weight reaches q (conservative)."""
    total = cumulative[-1] if cumulative else 0.0
    if total <= 0:
        return 1.0
    i = bisect.bisect_left(cumulative, q * total)
    return MAX_RATIO if i >= BINS else EDGES[i]


def quantiles(counts: list[float], q1: float, q2: float) -> tuple[float, float]:
    """`quantile` of the cumulative counts at q1 and q2: the running sums and both searches
    in C (itertools, bisect), the same floats as `quantile` over `accumulate(counts)`."""
    cumulative = list(accumulate(counts))
    total = cumulative[-1] if cumulative else 0.0
    if total <= 0:
        return 1.0, 1.0
    i1 = bisect.bisect_left(cumulative, q1 * total)
    i2 = bisect.bisect_left(cumulative, q2 * total)
    return (
        MAX_RATIO if i1 >= BINS else EDGES[i1],
        MAX_RATIO if i2 >= BINS else EDGES[i2],
    )


_BIN_OF: Final = {edge: i for i, edge in enumerate(EDGES)}  # a quantile's edge → its bin
# Partial sums found from a guess are not the cumulative list's floats (another order of
# additions), but within a few dozen ulps of the total of them: a comparison with the threshold
# decided by more than this share of the total is the one `quantile` makes, a closer one is
# left to `quantile` itself.
_SLACK: Final = 1e-9


def quantile_near(counts: list[float], whole: float, q: float, near: float) -> float:
    """`quantile(list(accumulate(counts)), q)`, searched from the bin whose edge is `near` (the
    last step's quantile): O(distance moved) additions after two sums in C, instead of a
    cumulative list per step. `whole` is sum(counts). Exact: a comparison closer than _SLACK
    of the total to a tie, or a total that is not a positive finite number, falls back to
    `quantile` over the cumulative list."""
    t = q * whole
    margin = _SLACK * whole
    # The top bin (a spiky load's upper quantiles stay there): its cumulative weight is the
    # total, the bin below it the total less its own, so no sum is needed. The same comparisons
    # the search below makes from there.
    if (
        near == MAX_RATIO
        and margin > 0.0
        and whole - t >= margin
        and t - (whole - counts[_TOP]) >= margin
    ):
        return MAX_RATIO
    i = _BIN_OF.get(near, 0)
    # ≈ the cumulative weight up to bin i, from the nearer end (the upper quantiles sit high)
    c = sum(counts[: i + 1]) if i < BINS // 2 else whole - sum(counts[i + 1 :])
    if c < t:
        while c < t and i < BINS - 1:
            i += 1
            c += counts[i]
    else:
        while i > 0 and c - counts[i] >= t:
            c -= counts[i]
            i -= 1
    if not (margin > 0.0 and c - t >= margin and (i == 0 or t - (c - counts[i]) >= margin)):
        return quantile(list(accumulate(counts)), q)
    return EDGES[i]


_TOP: Final = BINS - 1
_log: Final = math.log


def observe(
    state: ForecastState,
    load: float,
    now: float,
    step: float,
    steps: int,
    up_q: float,
    down_q: float,
    half_life: float,
    level_half_life: float = 0.0,
    growth: float = 0.0,
) -> ForecastState:
    """The state after seeing `load` (replica units) at `now`: one sample per decision step.

    `level` is the recent burst level: the highest load seen, decaying with `level_half_life`
    (0: no memory, the level is the load). Multiplicative growth from a zero bin is nothing, so
    for a bursty or scale-to-zero load the growth quantile alone holds no replicas between
    bursts; the level remembers the last burst for the scale-down gate (headroom.py). Growth
    is measured from the level H ago rather than the load H ago, so a burst that returns is
    not counted as growth from zero (a smooth load's level is about its load: little changes).

    `growth`: 2 ** (step / half_life), what a sample's weight grows by per step, when the
    caller keeps it (0: computed here; the same float either way)."""
    at = state.at
    if now < at + step * 0.999:
        return state  # the decider evaluates more often than once a step: same bucket
    if load < 0.0:
        load = 0.0
    level = load
    if level_half_life > 0 and at > -math.inf:
        decayed = state.level * 2.0 ** ((at - now) / level_half_life)
        if decayed > level:
            level = decayed
    # The last steps + 1 loads: sliced before the new one is added (one tuple built, not two).
    loads = (*state.loads[-steps:], load)
    levels = (*state.levels[-steps:], level)
    if len(levels) <= steps:  # also a state from before `levels`: refill the window first
        return msgspec.structs.replace(state, at=now, loads=loads, level=level, levels=levels)
    base, ahead = loads[0], loads[1]
    for j in range(2, len(loads)):  # max(loads[1:]), compiled to float compares: no slice
        x = loads[j]
        if x > ahead:
            ahead = x
    if base < IDLE and base < BURST_COLLAPSE * levels[0]:
        base = levels[0]  # between bursts: growth from the burst level, not from the gap
    # The growth sample's bin, inline: this runs once per decision step of every workload.
    ratio = (ahead + HALF) / (base + HALF)
    if ratio <= 1.0:
        b = 0
    else:
        x = _log(ratio) / _LOG_MAX * LOG_BINS  # in log bins: the first is [0, 1)
        b = 1 + int(x * FIRST_SPLIT) if x < 1.0 else int(x) + FIRST_SPLIT
        if b > _TOP:
            b = _TOP
    weight, total = state.weight, state.total
    if len(state.counts) == BINS:
        counts = list(state.counts)
    else:  # new, or a checkpoint from before the first bin's split: a histogram from scratch
        counts, weight, total = [0.0] * BINS, 1.0, 0.0
    counts[b] += weight
    total += weight
    weight *= growth if growth else 2.0 ** (step / half_life)
    if weight > _RENORMALIZE_AT:
        counts = [c / weight for c in counts]
        total /= weight
        weight = 1.0
    # Each quantile from where it was a step ago (one sample moves it a bin or so): no
    # cumulative list per step, the same bins as `quantile` over it.
    whole = sum(counts)
    up = quantile_near(counts, whole, up_q, state.up)
    down = quantile_near(counts, whole, down_q, state.down)
    return ForecastState(now, loads, tuple(counts), weight, total, up, down, level, levels)


def upper(base: float, growth: float) -> float:
    """The forecast's bound of the load over the horizon (replica units), never below `base`."""
    return max(base, (base + HALF) * growth - HALF)


def replicas_for(load: float) -> int:
    """The replicas that serve `load` (replica units) at the target: ceil, with float slack."""
    return max(0, math.ceil(load - 1e-9))
