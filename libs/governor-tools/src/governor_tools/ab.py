"""Scoring an A/B of scaling policies on live traffic: the Active policy against its shadows.

Each arm is a decision series (time, replicas asked) over the same load. The simulator's replica
model (governor_tools.sim.replicas) turns it into ready replicas: a replica asked for at t serves
from t + start-up, where the start-up is measured from the WorkloadState history (how long the
real target took from a spec increase to as many ready replicas), so both arms pay the same
start-up the live target does. Per second t of [start, end): a violation second has
load(t) > ready(t) × C; replica-hours integrate the replicas asked for; a scale event is a change
of the replicas asked for.

Confidence: a moving-block bootstrap (blocks of `block_seconds`, so that the seconds' dependence
is kept), resampling the same blocks for every arm: the 95 % interval of each total, and of each
shadow's difference to the Active arm; a difference is significant when its interval excludes 0.
Pure: the caller passes the records and a seed.
"""

from __future__ import annotations

import bisect
import math
import random
import statistics
from collections.abc import Sequence

import msgspec

from governor.events import WorkloadState
from governor_tools.sim import replicas as rm

METRICS = ("violation_seconds", "replica_hours", "scale_events")


class Arm(msgspec.Struct, frozen=True):
    """A policy's decisions: (decided_at, replicas asked), in time order."""

    name: str
    decisions: list[tuple[float, int]]


class Interval(msgspec.Struct, frozen=True):
    value: float
    low: float
    high: float

    @property
    def significant(self) -> bool:
        """For a difference: the interval excludes 0."""
        return self.low > 0 or self.high < 0


class ArmScore(msgspec.Struct, frozen=True):
    name: str
    violation_seconds: Interval
    replica_hours: Interval
    scale_events: Interval
    # Per second: (requested, ready), for the report's plot.
    series: list[tuple[int, int]] = msgspec.field(default_factory=list)


class Comparison(msgspec.Struct, frozen=True):
    arms: list[ArmScore]
    # shadow name -> metric -> (shadow − active) interval
    differences: dict[str, dict[str, Interval]]
    start: float
    end: float
    startup_seconds: float
    capacity_per_replica: float


def startup_from_states(states: Sequence[WorkloadState], default: float = 60.0) -> float:
    """Median time from a spec-replicas increase to ready ≥ that spec, in the state history."""
    ordered = sorted(states, key=lambda s: s.observed_at)
    delays = []
    for i in range(1, len(ordered)):
        prev, cur = ordered[i - 1], ordered[i]
        if cur.spec_replicas <= prev.spec_replicas:
            continue
        for later in ordered[i:]:
            if later.ready_replicas >= cur.spec_replicas:
                delays.append(later.observed_at - cur.observed_at)
                break
    return statistics.median(delays) if delays else default


def _per_second(
    load: Sequence[tuple[float, float]], arm: Arm, initial: int, start: float, end: float,
    startup: float, capacity: float,
) -> tuple[list[int], list[float], list[int], list[tuple[int, int]]]:  # fmt: skip
    """Per second of [start, end): violation (0/1), replica-hours, scale events, (asked, ready)."""
    times = [t for t, _ in load]
    model = rm.serving(initial, since=start - startup)
    decisions = sorted(arm.decisions)
    di = 0
    viol, hours, evs, series = [], [], [], []
    for k in range(math.ceil(end - start)):
        t = start + k
        events = 0
        while di < len(decisions) and decisions[di][0] <= t:
            before = model.requested
            model = rm.scale(model, decisions[di][1], decisions[di][0], startup)
            events += int(model.requested != before)
            di += 1
        i = bisect.bisect_right(times, t) - 1
        offered = load[i][1] if i >= 0 else 0.0
        ready = model.ready(t)
        viol.append(int(offered > ready * capacity))
        hours.append(model.requested / 3600.0)
        evs.append(events)
        series.append((model.requested, ready))
    return viol, hours, evs, series


def _blocks(values: Sequence[float], size: int) -> list[float]:
    return [sum(values[i : i + size]) for i in range(0, len(values), size)]


def _interval(samples: list[float], value: float) -> Interval:
    samples.sort()
    lo = samples[int(0.025 * (len(samples) - 1))]
    hi = samples[math.ceil(0.975 * (len(samples) - 1))]
    return Interval(value, lo, hi)


def compare(
    load: Sequence[tuple[float, float]],
    arms: Sequence[Arm],
    *,
    initial_replicas: int,
    start: float,
    end: float,
    capacity_per_replica: float,
    startup_seconds: float,
    block_seconds: int = 60,
    resamples: int = 1000,
    seed: int = 0,
) -> Comparison:
    """Score each arm (the first is the Active one) and bootstrap the intervals."""
    per_arm = {}
    series = {}
    for arm in arms:
        v, h, e, s = _per_second(load, arm, initial_replicas, start, end, startup_seconds,
                                 capacity_per_replica)  # fmt: skip
        per_arm[arm.name] = [_blocks(v, block_seconds), _blocks(h, block_seconds),
                             _blocks(e, block_seconds)]  # fmt: skip
        series[arm.name] = s
    n = len(next(iter(per_arm.values()))[0]) if per_arm else 0
    rng = random.Random(seed)
    draws = [[rng.randrange(n) for _ in range(n)] for _ in range(resamples)] if n else []

    def totals(blocks: list[float]) -> list[float]:
        return [sum(blocks[i] for i in d) for d in draws]

    scores = []
    for arm in arms:
        cols = per_arm[arm.name]
        viol, hours, evs = (_interval(totals(c), sum(c)) for c in cols)
        scores.append(ArmScore(arm.name, viol, hours, evs, series=series[arm.name]))
    active = arms[0].name
    diffs: dict[str, dict[str, Interval]] = {}
    for arm in arms[1:]:
        diffs[arm.name] = {}
        for m, (a, b) in enumerate(zip(per_arm[active], per_arm[arm.name], strict=True)):
            d = [x - y for x, y in zip(b, a, strict=True)]
            diffs[arm.name][METRICS[m]] = _interval(totals(d), sum(d))
    return Comparison(scores, diffs, start, end, startup_seconds, capacity_per_replica)


def verdict(c: Comparison) -> list[str]:
    """Plain sentences: which policy is better, and whether the difference is significant."""
    if len(c.arms) < 2:
        return ["only the Active policy has decisions: nothing to compare"]
    out = []
    active = c.arms[0].name
    for name, d in c.differences.items():
        v, r = d["violation_seconds"], d["replica_hours"]
        if v.value < 0 and r.value <= 0:
            better = f"{name} is better than {active} (fewer violation-seconds, no more replicas)"
        elif v.value > 0 and r.value >= 0:
            better = f"{active} is better than {name} (fewer violation-seconds, no more replicas)"
        else:
            cheaper = name if r.value < 0 else active
            safer = name if v.value < 0 else active
            better = f"neither dominates: {safer} violates less, {cheaper} uses fewer replicas"
        sig = [m for m, iv in d.items() if iv.significant]
        tail = f"significant in {', '.join(sig)}" if sig else "no difference is significant"
        out.append(f"{better}; {tail} (95 % bootstrap)")
    return out


def table(c: Comparison) -> str:
    rows = [f"{'policy':<28} {'violation-s':>24} {'replica-hours':>26} {'scale events':>22}"]
    for a in c.arms:
        cells = [f"{iv.value:.4g} [{iv.low:.4g}, {iv.high:.4g}]"
                 for iv in (a.violation_seconds, a.replica_hours, a.scale_events)]  # fmt: skip
        rows.append(f"{a.name:<28} {cells[0]:>24} {cells[1]:>26} {cells[2]:>22}")
    for name, d in c.differences.items():
        cells = [f"{iv.value:+.4g} [{iv.low:+.4g}, {iv.high:+.4g}]" for iv in d.values()]
        rows.append(f"{'Δ ' + name:<28} {cells[0]:>24} {cells[1]:>26} {cells[2]:>22}")
    return "\n".join(rows)
