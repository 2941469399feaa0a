"""The damped scale policy: one workload's desired replicas from its windows, as HPA would.

`evaluate` reads top to bottom as named steps, in HPA's order (horizontal.go
reconcileAutoscaler → computeReplicasForMetrics → normalizeDesiredReplicasWithBehaviors), with
KEDA's and Knative's additions slotted in; each step returns the count it binds (or None) and
adds its Reason:

1. `_net_events`: the scale events the rate limits see (the target's net change);
2. `_observe` → `_metric_step` → `_tolerance`: one desired count per metric (replicas.py), HPA's
   readiness rules and the tolerance band;
3. `_fallback`: missing/stale data (staleness.py) and the fallback;
4. `_target_state`: nothing known → not actionable; 0 replicas without scale-to-zero → scaling
   disabled (HPA); scale-to-zero activation and cooldown (KEDA, zero.py); current above max /
   below min → straight to the bound (HPA: no history recorded);
5. `_invalid_hold`: the max over metrics, and no scale-down while any metric is invalid (HPA);
6. `_panic`: panic mode on the short window (panic.py, Knative); (a forecast's floor slots in
   after it);
7. `_stabilization`, then `_rate_limits` with min/max/replicaCap (behavior.py, HPA); the cap is
   the effective max but never undercuts minReplicas; last, KEDA's 0 → 1.

`bound_by` names the last step that changed the count.

Deliberate differences from upstream, each for a reason the tests name:
* a metric whose ratio says "up" never yields fewer replicas than current (HPA's External Value
  can, when few pods are ready): the count holds, `readiness` (HPA applies the same rule to
  resource metrics);
* scale events are recorded when the decision is made (as HPA does), and the next evaluation
  records the difference if the target did something else (not applied yet, capped by capacity,
  changed by hand), so the rate limits see the net change of the target;
* while panicking the count never drops below the current replicas (Knative keeps its own panic
  maximum, which can be below pods added from elsewhere).

Extension point: elastic training jobs (`policy.elastic`) will add restart-aware damping after
step 7 (a resize must beat its restart penalty); today minReplicas stays the floor and `elastic`
is not read here.
"""

from __future__ import annotations

import math
from math import ceil
from typing import Final

from governor.events import MetricInput, Reason, Rule
from governor.pod_totals import per_pod_value as _per_pod
from governor.policy.behavior import (
    History,
    limit_rate,
    rate_limit_detail,
    record_event,
    record_sampled,
    stabilize,
)
from governor.policy.evaluation import Evaluation as _Evaluation
from governor.policy.evaluation import Metric as _Metric
from governor.policy.evaluation import compile_policy as _compile
from governor.policy.evaluation import g4
from governor.policy.evaluation import metric_desired as _metric_desired
from governor.policy.evaluation import ratio as _ratio
from governor.policy.headroom import event_reduction as _event_reduction
from governor.policy.headroom import forecast as _forecast
from governor.policy.headroom import forecast_floor as _forecast_floor
from governor.policy.headroom import tolerance_merge as _tolerance_merge
from governor.policy.panic import panic_step
from governor.policy.replicas import (
    raw_replicas,
)
from governor.policy.staleness import fallback_due, fallback_replicas
from governor.policy.types import MetricObservation, ScaleInputs, ScaleResult, ScaleState
from governor.policy.types import history_of as _history_of
from governor.policy.zero import above_activation, idle_check
from governor.spec import (
    ScalingPolicySpec,
)


def _no_workload(inputs: ScaleInputs) -> ScaleResult:
    newest = max(
        (o.newest_sample for o in inputs.observations.values() if o.newest_sample is not None),
        default=0.0,
    )
    return ScaleResult(
        desired=0,
        current=0,
        bound_by="no_workload_state",
        reasons=(Reason(rule="no_workload_state", detail="no state of the target seen yet"),),
        inputs=(),
        newest_input=newest,
        actionable=False,
    )


def _net_events(ev: _Evaluation, state: ScaleState) -> tuple[tuple[float, int], ...]:
    """The scale events the rate limits see: the target's net change, not only our decisions.

    Like HPA, a decision is recorded as a scale event when it is made (so it ages out of the
    rate-limit period exactly as HPA's does). Whatever the target did instead — the decision
    not applied yet, capped by capacity, or a manual change — shows up as a difference from the
    expected replicas and is recorded as a correcting event.
    """
    events = state.scale_events
    horizon = ev.c.behavior.event_horizon
    expected = state.expected_replicas
    if expected is not None and expected != ev.current:
        return record_event(events, ev.now, ev.current - expected, ev.now, horizon)
    if events and events[0][0] <= ev.now - horizon:
        return record_event(events, ev.now, 0, ev.now, horizon)
    return events


def _observe(ev: _Evaluation, observations: dict[str, MetricObservation]) -> None:
    """Observe → per-metric desired → tolerance, for every metric of the policy."""
    now, newest, zero = ev.now, 0.0, ev.c.zero
    for m in ev.c.metrics:
        obs = observations.get(m.name)
        value = obs.stable if obs is not None else None
        sample_at = obs.newest_sample if obs is not None else None
        if sample_at is not None and sample_at > newest:
            newest = sample_at
        age = now - sample_at if sample_at is not None else 0.0
        if value is None or age > m.stale_after:
            ev.failing = [m] if ev.failing is None else [*ev.failing, m]
            ev.failing_age = max(ev.failing_age, age)
            ev.inputs.append(
                MetricInput(
                    metric=m.name, value=value, target=m.target, target_type=m.kind,
                    newest_sample=sample_at, stale=True,
                )
            )  # fmt: skip
            continue
        assert obs is not None
        # A per-pod series scales on its per-instant total over the ready pods of now.
        total = obs.stable_total
        if total is not None:
            value = _per_pod(m.kind, value, total, ev.ready)
        if zero is not None and not ev.active:
            ev.active = above_activation(zero, value) or above_activation(zero, obs.panic)
        _metric_step(ev, m, obs, value)
    ev.newest = newest


def _metric_step(ev: _Evaluation, m: _Metric, obs: MetricObservation, value: float) -> None:
    """One fresh metric's desired count, the readiness and tolerance rules, its panic count."""
    current, ready, c, kind, target = ev.current, ev.ready, ev.c, m.kind, m.target
    if kind == "AverageValue" and current and target * current > 0:
        # replicas.per_pod_replicas and ratio for HPA's External AverageValue, inlined (the
        # usual target; four calls were a visible share of an evaluation): the same floats.
        ratio = value / (target * current)
        desired = current if c.tol_lo <= ratio <= c.tol_hi else math.ceil(value / target)
    else:
        d = _metric_desired(kind, current, ready, value, target, c.tol)
        if d is None:
            _unready(ev, m, obs, value)
            return
        desired = d
        ratio = _ratio(kind, value, target, current)
    desired, rule, detail = _tolerance(ev, m, value, ratio, desired)
    ev.inputs.append(
        MetricInput(
            metric=m.name, value=value, target=target, target_type=kind,
            newest_sample=obs.newest_sample, desired=desired,
        )
    )  # fmt: skip
    if rule != "tolerance":
        ev.all_within = False
    per_pod = kind == "AverageValue"  # raw_replicas is ceil(value / target) for it: inline
    if c.reduce is not None:
        if rule != "tolerance":
            raw = desired
        elif per_pod:
            raw = ceil(value / target)
        else:
            raw = raw_replicas(kind, current, ready, value, target)
        if raw > ev.untolerated:
            ev.untolerated = raw
    ev.reasons.append(Reason(rule=rule, metric=m.name, value=ratio, detail=detail))
    if c.forecast is not None:
        load = value / target if per_pod else ratio * current
        if math.isfinite(load):
            ev.loads = [(m.name, load)] if ev.loads is None else [*ev.loads, (m.name, load)]
    if desired > ev.best:
        ev.best, ev.best_rule = desired, rule
    if ev.policy.panic is not None and obs.panic is not None:
        total = obs.panic_total
        panic = obs.panic if total is None else _per_pod(kind, obs.panic, total, ready)
        pd = ceil(panic / target) if per_pod else raw_replicas(kind, current, ready, panic, target)
        if ev.panic_desired is None or pd > ev.panic_desired:
            ev.panic_desired, ev.panic_metric = pd, m.name


def _unready(ev: _Evaluation, m: _Metric, obs: MetricObservation, value: float) -> None:
    """A metric no ready replica reports (HPA's error): invalid for this evaluation."""
    ev.invalid += 1
    detail = f"no ready replica reports {m.kind} ({ev.ready} of {ev.current} ready)"
    ev.reasons.append(Reason(rule="readiness", metric=m.name, detail=detail))
    ev.inputs.append(
        MetricInput(
            metric=m.name, value=value, target=m.target, target_type=m.kind,
            newest_sample=obs.newest_sample,
        )
    )  # fmt: skip


def _tolerance(
    ev: _Evaluation, m: _Metric, value: float, ratio: float, desired: int
) -> tuple[int, Rule, str]:
    """A metric's count after HPA's readiness rules and the tolerance band, and why."""
    current, ready = ev.current, ev.ready
    if current and ((ratio > 1.0 and desired < current) or (ratio < 1.0 and desired > current)):
        # The ready pods scale the ratio; when too few are ready the count can move against
        # the load's direction (HPA's External Value does): hold instead, as HPA does for
        # resource metrics ("a change in scale direction").
        detail = (
            f"ratio {g4(ratio)} over {ready} ready of {current} would give {desired}:"
            f" holds {current}"
        )
        return current, "readiness", detail
    if m.kind == "Utilization" and desired == current and ready < current and ratio > 1.0:
        # HPA's unready rule: counting unready pods at 0 % left the change in the band or
        # flipped its direction.
        detail = (
            f"ratio {g4(ratio)} over {ready} ready; with {current - ready} unready at 0 %"
            f" no scale-up: holds {current}"
        )
        return desired, "readiness", detail
    if current and desired == current and ev.c.tol_lo <= ratio <= ev.c.tol_hi:
        detail = f"ratio {g4(ratio)} within tolerance {ev.c.band}: holds {current}"
        return desired, "tolerance", detail
    return desired, "metric", f"{m.kind} {g4(value)}{m.vs_target}: ratio {g4(ratio)} → {desired}"


def _fallback(ev: _Evaluation, state: ScaleState, step_seconds: float) -> tuple[int, float | None]:
    """Missing or stale data (staleness.py): the failure count, since when, and the fallback."""
    failing = ev.failing
    if not failing:
        return 0, None
    now = ev.now
    failing_since = state.failing_since if state.failing_since is not None else now
    # Failures count evaluation steps, not calls: the decider also evaluates on every tick
    # and message, and KEDA's failureThreshold counts polls. One call per step (HPA, the
    # simulator) counts exactly as before.
    failures = max(state.failures, 1 + int((now - failing_since) // step_seconds))
    failing_for = max(now - failing_since, ev.failing_age)
    fb = ev.policy.fallback
    held = failing
    if fb is not None and fallback_due(fb, failures, failing_for):
        covered = [f.name for f in failing if f.fallback_ok]
        held = [f for f in failing if not f.fallback_ok]
        if covered:
            fr = fallback_replicas(fb, ev.current)
            detail = (
                f"no fresh data for {failures} evaluations ({g4(failing_for)} s):"
                f" fallback {fb.behavior} → {fr}"
            )
            ev.reasons.append(Reason(rule="fallback", metric=",".join(covered), detail=detail))
            if fr > ev.best:
                ev.best, ev.best_rule = fr, "fallback"
            ev.all_within = False
    if held:
        ev.invalid += len(held)
        detail = (
            f"no fresh data for {failures} evaluations ({g4(failing_for)} s): no scale-down on it"
        )
        ev.reasons.append(
            Reason(rule="stale_hold", metric=",".join(f.name for f in held), detail=detail)
        )
    return failures, failing_since


def _target_state(
    ev: _Evaluation, cooled_down: bool, last_active: float | None
) -> tuple[int, Rule, bool] | None:
    """The target's own state and the zero step: (replicas, rule, actionable), or None."""
    current, zero, hi, lo = ev.current, ev.c.zero, ev.c.hi, ev.c.lo
    if zero is None and current == 0:
        detail = "the target has 0 replicas and minReplicas > 0: scaling is disabled (HPA)"
        ev.reasons.append(Reason(rule="disabled", detail=detail))
        return 0, "disabled", False
    if zero is not None and current == 0 and not ev.active:
        detail = (
            f"no fresh metric above activation threshold {g4(zero.activation_threshold)}:"
            " stays at 0"
        )
        ev.reasons.append(Reason(rule="activation", detail=detail))
        return 0, "activation", True
    if zero is not None and current > 0 and cooled_down:
        assert last_active is not None
        detail = (
            f"no metric above activation threshold {g4(zero.activation_threshold)}"
            f" for {g4(ev.now - last_active)} s (cooldown {g4(zero.cooldown_seconds)} s): to 0"
        )
        ev.reasons.append(Reason(rule="scale_to_zero", detail=detail))
        return 0, "scale_to_zero", True
    if current > hi:
        bound: Rule = "cap" if ev.c.cap_binds else "max"
        ev.reasons.append(Reason(rule=bound, detail=f"current {current} above {bound} {hi}"))
        return hi, bound, True
    if 0 < current < lo:
        ev.reasons.append(Reason(rule="min", detail=f"current {current} below minReplicas {lo}"))
        return lo, "min", True
    return None


def _invalid_hold(ev: _Evaluation) -> tuple[int, Rule] | None:
    """HPA's rule for invalid metrics: no scale-down while any metric is invalid."""
    best, current, invalid = ev.best, ev.current, ev.invalid
    if not (best < 0 or (invalid and best < current)):
        return None
    bound: Rule = "stale_hold" if ev.failing else "readiness"
    detail = (
        f"{invalid} of {len(ev.c.metrics)} metrics invalid"
        + (f" and the rest ask for {best}" if best >= 0 else "")
        + f": holds {current}"
    )
    ev.reasons.append(Reason(rule=bound, detail=detail))
    return current, bound


PanicState = tuple[float | None, int, float | None]  # ScaleState's (since, max, over_at)
_CALM: Final[PanicState] = (None, 0, None)


def _panic(ev: _Evaluation, state: ScaleState, desired: int) -> tuple[PanicState, int | None]:
    """Panic mode (Knative, panic.py): the new panic state and the count it forces, if any."""
    spec = ev.policy.panic
    assert spec is not None
    pd = ev.panic_desired
    if state.panic_since is None and (
        pd is None or not pd / (ev.ready if ev.ready > 1 else 1) >= spec.threshold_percent / 100.0
    ):
        # Not panicking and not over the threshold (panic.is_over), the usual case: panic_step
        # would change nothing and say nothing; its outcome is not built.
        return _CALM, None
    out = panic_step(
        spec,
        stable_desired=desired,
        panic_desired=ev.panic_desired,
        ready=ev.ready,
        since=state.panic_since,
        over_at=state.panic_over_at,
        panic_max=state.panic_max,
        now=ev.now,
    )
    if out.entered:
        detail = (
            f"panic: the panic window asks {ev.panic_desired} with {ev.ready} ready"
            f" (≥ {g4(spec.threshold_percent)} %)"
        )
        ev.reasons.append(Reason(rule="panic", metric=ev.panic_metric, detail=detail))
    if out.exited:
        detail = (
            f"panic ends: under {g4(spec.threshold_percent)} % for a"
            f" stable window ({g4(spec.stable_window_seconds)} s)"
        )
        ev.reasons.append(Reason(rule="panic", detail=detail))
    panic = (out.since, out.panic_max, out.over_at)
    if out.since is None:
        return panic, None
    panicked = max(out.desired, ev.current)
    if panicked == desired:
        return panic, None
    detail = (
        f"panicking for {ev.now - out.since:.0f} s: panic window asks {ev.panic_desired},"
        f" stable {desired}, never below {max(out.panic_max, ev.current)}"
    )
    ev.reasons.append(Reason(rule="panic", metric=ev.panic_metric, detail=detail))
    return panic, panicked


def _stabilization(
    ev: _Evaluation, past: History, desired: int, step_seconds: float
) -> tuple[int | None, History]:
    """HPA's stabilization windows: the count they hold (None: no change) and the new history.

    `past` is the history with HPA's initial recommendation already recorded (evaluate)."""
    behavior, current, now = ev.c.behavior, ev.current, ev.now
    times, replicas = past
    held = stabilize(
        times, replicas, current, desired, now, behavior.up.window, behavior.down.window
    )
    history = record_sampled(
        past, desired, now, step_seconds, behavior.horizon, changed=held != current
    )
    if held == desired:
        return None, history
    if desired < current or held > desired:
        detail = f"{ev.c.down_window} holds {held} (max of recommendations) over {desired}"
    else:
        detail = f"{ev.c.up_window} holds {held} (min of recommendations) under {desired}"
    ev.reasons.append(Reason(rule="stabilization", detail=detail))
    return held, history


def _rate_limits(
    ev: _Evaluation, events: tuple[tuple[float, int], ...], desired: int
) -> tuple[int, Rule] | None:
    """HPA's rate-limit policies and the min/max/replicaCap clamps (behavior.py)."""
    current, lo, hi, behavior = ev.current, ev.c.lo, ev.c.hi, ev.c.behavior
    if desired == current:
        return None  # no change: neither a rate limit nor a bound can bind (limit_rate's case)
    limited = limit_rate(current, desired, lo, hi, events, behavior, ev.now)
    if limited.rule is None:
        return None
    rule: Rule = limited.rule
    if rule == "max" and ev.c.cap_binds:
        rule = "cap"
    if rule in ("rate_limit", "disabled"):
        direction = "scaleUp" if desired > current else "scaleDown"
        detail = rate_limit_detail(direction, current, limited.limit, behavior, events, ev.now)
    elif rule == "min":
        detail = f"minReplicas {lo} holds {limited.replicas} over {desired}"
    else:
        detail = f"{rule} {hi} holds {limited.replicas} under {desired}"
    ev.reasons.append(Reason(rule=rule, detail=detail))
    return limited.replicas, rule


def _damp(
    ev: _Evaluation,
    state: ScaleState,
    events: tuple[tuple[float, int], ...],
    past: History,
    step: float,
) -> tuple[int, Rule, History, PanicState | None]:
    """The metrics' count through panic, stabilization and the rate limits, and the new state."""
    current, reasons = ev.current, ev.reasons
    desired = ev.best
    bound = "tolerance" if ev.all_within and desired == current else ev.best_rule
    if current == 0 and desired < 1:
        desired, bound = 1, "scale_to_zero"
        reasons.append(Reason(rule="scale_to_zero", detail="activation from 0: at least 1"))
    out: PanicState | None = None
    if ev.policy.panic is not None:
        out, panicked = _panic(ev, state, desired)
        if panicked is not None:
            desired, bound = panicked, "panic"
    if ev.c.forecast is not None:
        floor = _forecast_floor(ev, desired)
        if floor is not None:
            desired, bound = floor, "forecast"
    if ev.c.reduce is not None:
        held = _tolerance_merge(ev) if bound == "tolerance" else _event_reduction(ev, desired)
        if held is not None:
            desired, bound = held, "event_reduction"
    stabilized, history = _stabilization(ev, past, desired, step)
    if stabilized is not None:
        desired, bound = stabilized, "stabilization"
    limited = _rate_limits(ev, events, desired)
    if limited is not None:
        desired, bound = limited
    if current == 0 and desired < 1:
        # Percent-only policies cannot grow from 0; KEDA's 0 → 1 is a step of its own.
        desired, bound = 1, "scale_to_zero"
        reasons.append(Reason(rule="scale_to_zero", detail="activation: 0 → 1"))
    return desired, bound, history, out


def evaluate(
    policy: ScalingPolicySpec,
    inputs: ScaleInputs,
    state: ScaleState,
    now: float,
    *,
    step_seconds: float = 15.0,
) -> tuple[ScaleResult, ScaleState]:
    """One evaluation of the scale policy: the result and the state to keep for the next one.

    Pure: neither `state` nor `policy` is modified, and the same arguments give the same output.
    `policy` is treated as a value — what is derived from it alone is memoized by identity, so
    change a policy by replacing it, never by mutating it. `step_seconds` is the evaluation step
    the recommendation history is bucketed by (behavior.py); evaluating more often is fine.
    """
    if not step_seconds > 0:
        raise ValueError(f"step_seconds must be > 0, got {step_seconds}")
    if inputs.workload is None:
        return _no_workload(inputs), state
    wl = inputs.workload
    ev = _Evaluation(
        policy, _compile(policy), wl.spec_replicas, wl.ready_replicas, now, state.merge_since
    )
    current = ev.current
    events = _net_events(ev, state)
    _observe(ev, inputs.observations)
    failures, failing_since = _fallback(ev, state, step_seconds) if ev.failing else (0, None)
    forecasts = state.forecasts
    if ev.c.forecast is not None:
        forecasts = _forecast(ev, state, wl.startup_p90_seconds, step_seconds)
    last_active, cooled_down = state.last_active, False
    if ev.c.zero is not None:
        idle = idle_check(ev.c.zero, ev.active or ev.failing is not None, last_active, now)
        last_active, cooled_down = idle.last_active, idle.cooled_down
    # HPA's recordInitialRecommendation: the first sync of a target records its current
    # replicas, whatever that sync then decides (bounds, invalid metrics, disabled), so a later
    # stabilization window sees it exactly as long as HPA's does.
    history = (
        (state.rec_at, state.rec_replicas)
        if state.rec_at or not state.recommendations
        else _history_of(state)  # a checkpoint of the older layout
    )
    if not history[0] and ev.c.behavior.horizon > 0:
        history = ((now,), (current,))
    panic = (state.panic_since, state.panic_max, state.panic_over_at)
    actionable = True
    bound: Rule
    c = ev.c
    # Most evaluations meet neither step: skip their calls (a call is a visible share of one).
    held = None
    if current == 0 or cooled_down or not c.lo <= current <= c.hi:
        held = _target_state(ev, cooled_down, last_active)
    hold = None
    if held is None and (ev.best < 0 or ev.invalid):
        hold = _invalid_hold(ev)
    if held is not None:
        desired, bound, actionable = held
    elif hold is not None:
        desired, bound = hold
    else:
        desired, bound, history, out = _damp(ev, state, events, history, step_seconds)
        if out is not None:
            panic = out
    if actionable and desired != current:
        events = record_event(events, now, desired - current, now, ev.c.behavior.event_horizon)
    next_state = ScaleState(
        (), events, panic[0], panic[1], failures, last_active,
        desired if actionable else current, failing_since, panic[2], forecasts, ev.merge_since,
        history[0], history[1],
    )  # fmt: skip
    # (positional: ScaleResult's field order; keywords cost a visible share of a call)
    result = ScaleResult(
        desired, current, bound, tuple(ev.reasons), tuple(ev.inputs), ev.newest, actionable
    )
    return result, next_state
