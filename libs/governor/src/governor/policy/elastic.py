"""Restart-aware damping for elastic training jobs (pure).

Every membership change of an elastic job (TorchElastic, a Volcano job above its minAvailable)
stops all workers, re-forms the group and restarts from the last checkpoint: a resize costs
progress. So a resize the job itself does not need is only made when it pays for its restart,
and several changes are folded into one.

The model (`governor.spec.ElasticSpec`):

* speedup(n) = n ** scalingEfficiency — a power law: speedup(1) = 1, linear at efficiency 1,
  diminishing returns below it (each doubling of workers gives 2 ** e, e.g. 1.87 at 0.9).
  When the job publishes a throughput metric (`THROUGHPUT_METRIC`, samples per second), the
  measured throughput at the replica counts it has run at replaces the model: the ratio of two
  measured points is used as it is, a measured point and an unmeasured one are bridged by the
  model's ratio.
* Pollux's restart discount (OSDI'21, its simulator): a job of age a that restarted r times runs
  at speedup × D(a, r) with D(a, r) = max(a − r·δ, 0) / (a + δ), δ = restartPenaltySeconds.
  A resize from n to m replicas is worth it when speedup(m) · D(a, r + 1) > speedup(n) · D(a, r):
  the restart it adds must be paid for by the faster rate. A young job that already restarted
  often (D = 0) is left alone until its age amortises the restarts. Without a known start time
  (WorkloadState.started_at) the age is unbounded and D = 1: only the interval below damps.
* minResizeIntervalSeconds: no voluntary resize within this long of the previous one (forced or
  not). A grow held by it is not queued: the next evaluation after the interval takes the latest
  target, so several grants that arrive in between become one resize.
* batching a grow (ski rental): room usually frees in steps (a service scaling in over a minute),
  and taking each step would restart the job each time. A worthwhile grow is held until the
  progress lost by waiting, Σ (speedup(target)/speedup(current) − 1)·dt since the grow first
  became possible, reaches what one restart costs at the target, δ · speedup(target)/speedup
  (current) (both in units of the current rate). Then the latest target is taken. Waiting never
  costs more than one restart (the break-even rule of ski rental: 2-competitive), a large gain
  is taken within seconds, and a small step waits long enough for the next ones to join it.

What is never damped (`judge` returns "apply"):

* a shrink forced by capacity (the pool cannot keep the current replicas: a higher tier took
  them, a node or device failed) — priority wins; it still counts as a restart;
* a grow up to the job's floor (the floor is a guarantee) and a start from zero.

A voluntary shrink (the job's own recommendation fell) waits for the interval but needs no gain.
Every held resize carries a Reason with rule "restart_damping" and the numbers behind it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal

import msgspec

from governor.events import Reason
from governor.spec import ElasticSpec

THROUGHPUT_METRIC = "throughput"
MAX_MEASURED = 64  # replica counts whose throughput is remembered


class ElasticState(msgspec.Struct, omit_defaults=True, array_like=True):
    """What the decider remembers of one elastic job between evaluations.

    last_resize_at: when the decider last changed its replicas (forced resizes included);
    resizes: how many resizes the decider has made (each one restarts the job);
    throughput: measured throughput by replica count (from the job's THROUGHPUT_METRIC);
    pending_since / pending_at / pending_loss: a held grow — since when, when it was last
    evaluated, and the progress waiting has cost so far (in seconds at the current rate).
    """

    last_resize_at: float | None = None
    resizes: int = 0
    throughput: dict[int, float] = msgspec.field(default_factory=dict)
    pending_since: float | None = None
    pending_at: float | None = None
    pending_loss: float = 0.0


Kind = Literal["keep", "apply", "hold"]


class Verdict(msgspec.Struct, frozen=True, kw_only=True):
    """What to do with a proposed change: keep (no change), apply it, or hold the current."""

    kind: Kind
    replicas: int  # the replicas to ask for
    forced: bool = False  # a capacity-forced shrink: applied whatever the damping says
    reason: Reason | None = None


def speedup(n: float, efficiency: float) -> float:
    """speedup(n) = n ** efficiency (0 for no replicas)."""
    return float(n) ** efficiency if n > 0 else 0.0


def discount(age: float, restarts: int, penalty: float) -> float:
    """Pollux's restart discount max(age − restarts·δ, 0) / (age + δ); 1 for an unknown age."""
    if math.isinf(age):
        return 1.0
    age = max(age, 0.0)
    if age + penalty <= 0:
        return 1.0 if restarts == 0 else 0.0
    return max(age - restarts * penalty, 0.0) / (age + penalty)


def speedup_ratio(
    n: int, m: int, efficiency: float, measured: Mapping[int, float] | None = None
) -> float:
    """speedup(m) / speedup(n), from measured throughput where both are known (n > 0)."""
    if n <= 0:
        return math.inf if m > 0 else 1.0
    if measured:
        tn, tm = measured.get(n), measured.get(m)
        if tn is not None and tm is not None and tn > 0:
            return tm / tn
    return speedup(m, efficiency) / speedup(n, efficiency)


def worth_resizing(
    spec: ElasticSpec,
    current: int,
    target: int,
    *,
    age: float,
    restarts: int,
    measured: Mapping[int, float] | None = None,
) -> tuple[bool, str]:
    """Whether growing from `current` to `target` beats the restart it costs, and why."""
    delta = spec.restart_penalty_seconds
    before = discount(age, restarts, delta)
    after = discount(age, restarts + 1, delta)
    ratio = speedup_ratio(current, target, spec.scaling_efficiency, measured)
    gain = ratio * after
    ok = gain > before
    age_text = "unknown age" if math.isinf(age) else f"age {age:.0f}s"
    detail = (
        f"speedup ×{ratio:.3f} for {current}→{target}; restart discount "
        f"{after:.3f} after vs {before:.3f} now ({age_text}, {restarts} restarts, δ {delta:g}s)"
    )
    return ok, detail


def judge(
    spec: ElasticSpec,
    state: ElasticState,
    *,
    current: int,
    target: int,
    want: int,
    floor: int,
    now: float,
    restarts: int = 0,
    started_at: float | None = None,
) -> tuple[Verdict, ElasticState]:
    """Whether an elastic job should move from `current` to `target` replicas now (pure), and
    the state to keep (a held grow accumulates what waiting costs; see the module docstring).

    `want` is what the job itself asks for (its recommendation within its bounds); a target below
    both `current` and `want` is a shrink the pool forces. `restarts` is what the cluster reports
    (WorkloadState.restarts); the larger of it and the decider's own resize count is used.
    The state returned does not record the resize itself: call `resized` once it is decided.
    """
    idle = msgspec.structs.replace(state, pending_since=None, pending_at=None, pending_loss=0.0)
    if target == current:
        return Verdict(kind="keep", replicas=current), idle
    if target < current and target < want:
        return Verdict(kind="apply", replicas=target, forced=True), idle
    if target > current and (current == 0 or current < floor):
        return Verdict(kind="apply", replicas=target), idle
    if target < current:
        held = _interval_hold(spec, state, current, target, now)
        return (held, idle) if held is not None else (Verdict(kind="apply", replicas=target), idle)
    ratio = speedup_ratio(current, target, spec.scaling_efficiency, state.throughput)
    # The grow is possible: waiting costs (ratio − 1) per second at the current rate.
    if state.pending_since is None or state.pending_at is None:
        pending = msgspec.structs.replace(idle, pending_since=now, pending_at=now)
    else:
        waited = max(0.0, now - state.pending_at)
        pending = msgspec.structs.replace(
            state, pending_at=now, pending_loss=state.pending_loss + (ratio - 1.0) * waited
        )
    held = _interval_hold(spec, state, current, target, now)
    if held is not None:
        return held, pending
    age = now - started_at if started_at is not None else math.inf
    ok, detail = worth_resizing(
        spec,
        current,
        target,
        age=age,
        restarts=max(restarts, state.resizes),
        measured=state.throughput,
    )
    if not ok:
        return (
            _hold(current, target, f"gain does not beat the restart: {detail}"),
            pending,
        )
    cost = spec.restart_penalty_seconds * ratio
    if pending.pending_loss + 1e-9 < cost:
        return (
            _hold(
                current,
                target,
                f"batching: waiting has cost {pending.pending_loss:.1f}s of progress, "
                f"a restart costs {cost:.1f}s (δ {spec.restart_penalty_seconds:g}s × "
                f"speedup ×{ratio:.3f})",
            ),
            pending,
        )
    return Verdict(kind="apply", replicas=target), idle


def _hold(current: int, target: int, why: str) -> Verdict:
    return Verdict(
        kind="hold",
        replicas=current,
        reason=Reason(
            rule="restart_damping",
            detail=f"resize {current}→{target} held: {why}",
            value=float(target),
        ),
    )


def _interval_hold(
    spec: ElasticSpec, state: ElasticState, current: int, target: int, now: float
) -> Verdict | None:
    interval = spec.min_resize_interval_seconds
    if state.last_resize_at is None or now - state.last_resize_at >= interval:
        return None
    since = now - state.last_resize_at
    return _hold(
        current,
        target,
        f"last resize {since:.0f}s ago, minResizeIntervalSeconds {interval:g}",
    )


def resized(state: ElasticState, now: float) -> ElasticState:
    """The state after the decider changed the job's replicas (a restart of the job)."""
    return msgspec.structs.replace(
        state,
        last_resize_at=now,
        resizes=state.resizes + 1,
        pending_since=None,
        pending_at=None,
        pending_loss=0.0,
    )


def measured(state: ElasticState, replicas: int, throughput: float) -> ElasticState:
    """Remember the job's throughput at `replicas` (the latest reading wins)."""
    if replicas <= 0 or not throughput > 0 or math.isinf(throughput):
        return state
    table = dict(state.throughput)
    table.pop(replicas, None)
    table[replicas] = throughput
    while len(table) > MAX_MEASURED:
        table.pop(next(iter(table)))
    return msgspec.structs.replace(state, throughput=table)


def progress(replicas: int, seconds: float, efficiency: float) -> float:
    """Work done at `replicas` over `seconds` (in single-replica seconds): the simulator's proxy."""
    return speedup(replicas, efficiency) * max(seconds, 0.0)
