"""HPA's `behavior`: stabilization windows and rate-limit policies, as pure functions of time.

Ported from kubernetes `pkg/controller/podautoscaler/horizontal.go`
(stabilizeRecommendationWithBehaviors, convertDesiredReplicasWithBehaviorRate,
calculateScaleUpLimitWithScalingRules, calculateScaleDownLimitWithBehaviors,
getReplicasChangePerPeriod) and the defaulting of `pkg/apis/autoscaling/v2/defaults.go`
(GenerateHPAScaleUpRules / GenerateHPAScaleDownRules). HPA keeps its history in controller
memory; here it lives in ScaleState and every function takes `now`.

Recommendation history, bucketed so the state stays small. HPA keeps one entry per sync
(every 15 s), but governor evaluates on every message and on every tick, so the history is kept
per step bucket (floor(t / step)): each bucket holds the smallest and the largest recommendation
recorded in it, as two (time, replicas) pairs, or one pair when they agree, stamped with the newest
evaluation time of the bucket. The up-window takes the min over the window and the down-window the
max, so the bucket's min and max are exactly what each needs: with one evaluation per step this is
HPA's history entry for entry.

With several evaluations per step the policy records through `record_sampled`: the step's first
evaluation (what HPA's one sync would have seen) and every later one that changed the count.
Recording them all made a continuously evaluated policy hold its scale-downs longer than HPA on
the same load: the down-window took the max of ~12 overlapping window means where HPA's takes 4,
and each bucket's entry outlived HPA's by up to one step (the demo's search service: 5 % more
replica-hours than its HPA twin, ~4 points of it from these two). A count the policy did move to
is always kept, so a scale-up made between syncs is held for the whole window (no flapping).

Scale events are one signed list ((time, +added) or (time, −removed)); HPA's two lists are the
positive and negative halves, and periodStart = current − added + removed = current − Σchange.
"""

from __future__ import annotations

import math
from bisect import bisect_right, insort
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Literal

import msgspec

from governor.policy.replicas import DEFAULT_TOLERANCE, Tolerances
from governor.spec import Behavior, HPAScalingRules

SelectPolicy = Literal["Max", "Min", "Disabled"]
PolicyType = Literal["Pods", "Percent"]

Entry = tuple[float, int]
_time = itemgetter(0)


@dataclass(frozen=True, slots=True)
class RatePolicy:
    type: PolicyType
    value: int
    period_seconds: int


@dataclass(frozen=True, slots=True)
class Rules:
    """One direction's scaling rules with HPA's defaults filled in."""

    window: float
    select: SelectPolicy
    policies: tuple[RatePolicy, ...]
    tolerance: float = DEFAULT_TOLERANCE

    @property
    def longest_period(self) -> int:
        return max((p.period_seconds for p in self.policies), default=0)


# HPA defaults (pkg/apis/autoscaling/v2/defaults.go; downscale window from the controller flag).
DEFAULT_SCALE_UP = Rules(
    window=0.0,
    select="Max",
    policies=(RatePolicy("Pods", 4, 15), RatePolicy("Percent", 100, 15)),
)
DEFAULT_SCALE_DOWN = Rules(window=300.0, select="Max", policies=(RatePolicy("Percent", 100, 15),))


def _merge(user: HPAScalingRules | None, default: Rules) -> Rules:
    """copyHPAScalingRules: every field the user set replaces the default's, field by field."""
    if user is None:
        return default
    tol = user.tolerance_value()
    return Rules(
        window=(
            default.window
            if user.stabilization_window_seconds is None
            else float(user.stabilization_window_seconds)
        ),
        select=default.select if user.select_policy is None else user.select_policy,
        policies=(
            default.policies
            if user.policies is None
            else tuple(RatePolicy(p.type, p.value, p.period_seconds) for p in user.policies)
        ),
        tolerance=default.tolerance if tol is None else tol,
    )


@dataclass(frozen=True, slots=True)
class ResolvedBehavior:
    up: Rules
    down: Rules
    tolerances: Tolerances
    # How long history must be kept: the longest window, the longest rate-limit period.
    horizon: float
    event_horizon: float


def _resolved(up: Rules, down: Rules) -> ResolvedBehavior:
    return ResolvedBehavior(
        up=up,
        down=down,
        tolerances=Tolerances(down=down.tolerance, up=up.tolerance),
        horizon=max(up.window, down.window),
        event_horizon=float(max(up.longest_period, down.longest_period)),
    )


DEFAULT_BEHAVIOR = _resolved(DEFAULT_SCALE_UP, DEFAULT_SCALE_DOWN)


def resolve(behavior: Behavior | None) -> ResolvedBehavior:
    if behavior is None or (behavior.scale_up is None and behavior.scale_down is None):
        return DEFAULT_BEHAVIOR
    return _resolved(
        _merge(behavior.scale_up, DEFAULT_SCALE_UP), _merge(behavior.scale_down, DEFAULT_SCALE_DOWN)
    )


# --- stabilization ----------------------------------------------------------------------------


def stabilize(
    times: tuple[float, ...],
    replicas: tuple[int, ...],
    current: int,
    desired: int,
    now: float,
    up_window: float,
    down_window: float,
) -> int:
    """stabilizeRecommendationWithBehaviors: current clamped into [min up-window, max down-window].

    The history is two aligned sequences, the entries' times and their recommendations (see
    `record`). Entries count when strictly newer than the cutoff (Go's `timestamp.After(cutoff)`).
    The times are in order (record keeps them so), so each window is a suffix found by bisection.
    """
    # Loops, not min()/max() over a slice: compiled, they compare the counts as machine
    # integers, where the builtins compare objects (a tenth of an evaluation).
    up = desired
    n = len(times)
    i = bisect_right(times, now - up_window)
    while i < n:
        r = replicas[i]
        if r < up:
            up = r
        i += 1
    down = desired
    i = bisect_right(times, now - down_window)
    while i < n:
        r = replicas[i]
        if r > down:
            down = r
        i += 1
    result = current
    if result < up:
        result = up
    if result > down:
        result = down
    return result


History = tuple[tuple[float, ...], tuple[int, ...]]


def record(history: History, desired: int, now: float, step: float, horizon: float) -> History:
    """The history after recording `desired` at `now`: pruned past `horizon`, bucketed by step.

    Two aligned tuples, times and recommendations (ScaleState keeps them flat: a tuple of
    (time, replicas) pairs is one more object per entry that the collector and the cache see).
    Kept in time order; should `now` go back (a clock step), the entry is inserted in place.
    """
    times, replicas = history
    start = bisect_right(times, now - horizon)
    end = len(times)
    bucket = now // step
    lo = hi = desired
    while end > start and times[end - 1] <= now and times[end - 1] // step == bucket:
        end -= 1
        r = replicas[end]
        if r < lo:
            lo = r
        elif r > hi:
            hi = r
    if end > start and times[end - 1] > now:
        out = list(zip(times[start:end], replicas[start:end], strict=True))
        insort(out, (now, lo), key=_time)
        if hi != lo:
            insort(out, (now, hi), key=_time)
        return tuple(t for t, _ in out), tuple(r for _, r in out)
    if hi == lo:
        return (*times[start:end], now), (*replicas[start:end], lo)
    return (*times[start:end], now, now), (*replicas[start:end], lo, hi)


def record_sampled(
    history: History, desired: int, now: float, step: float, horizon: float, *, changed: bool
) -> History:
    """`record` for a policy evaluated several times a step: a step already recorded by an
    earlier evaluation keeps its entry unless this one `changed` the count (module docstring).

    Entries recorded at `now` itself (HPA's initial recommendation, a second evaluation at the
    same instant) are merged as `record` does, and a clock that went back is left to `record`.
    """
    times = history[0]
    if not changed and times:
        last = times[-1]
        if last < now and last // step == now // step:
            return history
    return record(history, desired, now, step, horizon)


def split_history(history: Sequence[Entry]) -> History:
    """(time, replicas) pairs as the two aligned tuples `record` keeps (older checkpoints)."""
    return tuple(t for t, _ in history), tuple(r for _, r in history)


# --- rate limits ------------------------------------------------------------------------------


def replicas_change(events: Sequence[Entry], period: float, now: float) -> int:
    """getReplicasChangePerPeriod over the signed events: net change strictly inside the period."""
    if not events:
        return 0  # the usual case; the generator would cost more than the sum
    cutoff = now - period
    return sum(change for t, change in events if t > cutoff)


def scale_up_limit(current: int, events: Sequence[Entry], rules: Rules, now: float) -> int:
    """calculateScaleUpLimitWithScalingRules."""
    return _limit(current, events, rules, now, up=True)


def scale_down_limit(current: int, events: Sequence[Entry], rules: Rules, now: float) -> int:
    """calculateScaleDownLimitWithBehaviors."""
    return _limit(current, events, rules, now, up=False)


def _limit(current: int, events: Sequence[Entry], rules: Rules, now: float, *, up: bool) -> int:
    """Each rule proposes a bound from the replicas at the start of its period; selectPolicy Max
    takes the loosest (the largest up, the smallest down), Min the tightest."""
    if rules.select == "Disabled":
        return current
    take_larger = up == (rules.select != "Min")
    result: int | None = None
    for p in rules.policies:
        start = current - replicas_change(events, p.period_seconds, now)
        if up:
            # Percent rounds up so that a small target can always grow (HPA's comment).
            proposed = (
                start + p.value if p.type == "Pods" else math.ceil(start * (1 + p.value / 100))
            )
        else:
            # Percent truncates toward zero, as Go's int32().
            proposed = start - p.value if p.type == "Pods" else int(start * (1 - p.value / 100))
        if result is None or (proposed > result if take_larger else proposed < result):
            result = proposed
    return current if result is None else result


class Limited(msgspec.Struct, frozen=True):
    replicas: int
    # None when the desired count was within range; else what bound it.
    rule: Literal["rate_limit", "disabled", "min", "max"] | None
    limit: int


def limit_rate(
    current: int,
    desired: int,
    lo: int,
    hi: int,
    events: Sequence[Entry],
    behavior: ResolvedBehavior,
    now: float,
) -> Limited:
    """convertDesiredReplicasWithBehaviorRate: the rate limit and min/max, in HPA's order."""
    if desired > current:
        rules = behavior.up
        limit = scale_up_limit(current, events, rules, now)
        # Past events may put the limit below current: then hold until they age out.
        limit = max(limit, current)
        if hi > limit:
            allowed = limit
            rule: Literal["rate_limit", "disabled", "min", "max"] = (
                "disabled" if rules.select == "Disabled" else "rate_limit"
            )
        else:
            allowed, rule = hi, "max"
        if desired > allowed:
            return Limited(allowed, rule, allowed)
    elif desired < current:
        rules = behavior.down
        limit = min(scale_down_limit(current, events, rules, now), current)
        if lo < limit:
            allowed = limit
            rule = "disabled" if rules.select == "Disabled" else "rate_limit"
        else:
            allowed, rule = lo, "min"
        if desired < allowed:
            return Limited(allowed, rule, allowed)
    return Limited(desired, None, desired)


def record_event(
    events: Sequence[Entry], at: float, change: int, now: float, horizon: float
) -> tuple[Entry, ...]:
    """The scale events after a change of `change` replicas at `at`, pruned past `horizon`.

    Changes at the same instant are summed (and dropped when they cancel): a decision that the
    target has not applied yet is corrected and re-made at every evaluation, and must not grow
    the list while it waits.
    """
    cutoff = now - horizon
    out = [e for e in events if e[0] > cutoff]
    if change and at > cutoff:
        if out and out[-1][0] == at:
            change += out.pop()[1]
        if change:
            out.append((at, change))
    return tuple(out)


def rate_limit_detail(
    direction: str,
    current: int,
    limit: int,
    behavior: ResolvedBehavior,
    events: Sequence[Entry],
    now: float,
) -> str:
    """Names the policy that produced the limit; built only when a rate limit binds."""
    rules = behavior.up if direction == "scaleUp" else behavior.down
    if rules.select == "Disabled":
        return f"{direction} selectPolicy Disabled holds {current}"
    for p in rules.policies:
        one = type(rules)(rules.window, rules.select, (p,), rules.tolerance)
        f = scale_up_limit if direction == "scaleUp" else scale_down_limit
        if f(current, events, one, now) == limit:
            return (
                f"{direction} policy {p.type} {p.value}/{p.period_seconds}s limits to {limit}"
                f" (selectPolicy {rules.select})"
            )
    # Only the clamp to current can make no single policy match: the period's budget is spent.
    return f"{direction} policies hold {current}: this period's changes used up their budget"
