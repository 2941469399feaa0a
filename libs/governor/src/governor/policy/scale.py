"""The damped scale policy: one workload's desired replicas from its windows, as HPA would.

`evaluate` composes, in HPA's order (horizontal.go reconcileAutoscaler → computeReplicasForMetrics
→ normalizeDesiredReplicasWithBehaviors), with KEDA's and Knative's additions slotted in:

1. one desired count per metric (replicas.py), missing/stale data (staleness.py) and the fallback;
2. the target's own state: nothing known → not actionable; 0 replicas without scale-to-zero →
   scaling disabled (HPA); scale-to-zero activation and cooldown (KEDA, zero.py); current above
   max / below min → straight to the bound (HPA: no history recorded);
3. the max over metrics, and no scale-down while any metric is invalid (HPA);
4. panic mode on the short window (panic.py, Knative);
5. stabilization windows, then rate limits and min/max/replicaCap (behavior.py, HPA); the cap is
   the effective max but never undercuts minReplicas.

Every stage that changes the count adds a Reason; `bound_by` names the last one that did.

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
step 5 (a resize must beat its restart penalty); today minReplicas stays the floor and `elastic`
is not read here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from governor.events import MetricInput, Reason, Rule
from governor.policy.behavior import (
    ResolvedBehavior,
    limit_rate,
    record,
    record_event,
    resolve,
    scale_down_limit,
    scale_up_limit,
    stabilize,
)
from governor.policy.panic import panic_step
from governor.policy.replicas import (
    Tolerances,
    per_pod_replicas,
    raw_replicas,
    usage_ratio_replicas,
    utilization_replicas,
    whole_percent,
)
from governor.policy.staleness import fallback_due, fallback_replicas, stale_after
from governor.policy.types import ScaleInputs, ScaleResult, ScaleState
from governor.policy.zero import above_activation, idle_check
from governor.spec import MetricSpec, ResourceSource, ScalingPolicySpec


def _target(metric: MetricSpec) -> float:
    t = metric.target
    kind = t.type
    value = (
        t.average_utilization
        if kind == "Utilization"
        else t.value
        if kind == "Value"
        else t.average_value
    )
    assert value is not None  # MetricSpec.__post_init__ guarantees it
    return value


@dataclass(frozen=True, slots=True)
class _Metric:
    name: str
    kind: str
    target: float
    stale_after: float
    # KEDA has no fallback for cpu/memory: a failing resource metric only ever holds.
    fallback_ok: bool
    # Preformatted for the reasons (float formatting is a visible share of an evaluation).
    vs_target: str


@dataclass(frozen=True, slots=True)
class _Compiled:
    """What evaluate derives from a policy alone: resolved behavior, per-metric constants."""

    behavior: ResolvedBehavior
    metrics: tuple[_Metric, ...]
    up_window: str
    down_window: str


_COMPILED: dict[int, tuple[ScalingPolicySpec, _Compiled]] = {}
_COMPILED_MAX = 4096


def _compile(policy: ScalingPolicySpec) -> _Compiled:
    """Memoized by identity: a policy is a value (a new version is a new object), and the cache
    holds a reference, so an id cannot be reused while its entry lives."""
    hit = _COMPILED.get(id(policy))
    if hit is not None and hit[0] is policy:
        return hit[1]
    behavior = resolve(policy.behavior)
    compiled = _Compiled(
        behavior=behavior,
        up_window=f"stabilization window {behavior.up.window:.4g} s",
        down_window=f"stabilization window {behavior.down.window:.4g} s",
        metrics=tuple(
            _Metric(
                m.name,
                m.target.type,
                _target(m),
                stale_after(policy, m),
                not isinstance(m.source, ResourceSource),
                f" vs target {_target(m):.4g}",
            )
            for m in policy.metrics
        ),
    )
    if len(_COMPILED) >= _COMPILED_MAX:
        del _COMPILED[next(iter(_COMPILED))]
    _COMPILED[id(policy)] = (policy, compiled)
    return compiled


def _ratio(kind: str, value: float, target: float, current: int) -> float:
    if kind == "Utilization":
        return whole_percent(value) / target
    if kind == "Value":
        return value / target
    return value / (target * current) if current else math.inf


def _metric_desired(
    kind: str, current: int, ready: int, value: float, target: float, tol: Tolerances
) -> int | None:
    if kind == "Utilization":
        return utilization_replicas(current, ready, value, target, tol)
    if kind == "Value":
        return usage_ratio_replicas(current, value / target, ready, tol)
    return per_pod_replicas(current, value, target, tol)


def _rate_detail(
    direction: str,
    current: int,
    limit: int,
    behavior: ResolvedBehavior,
    events: list[tuple[float, int]],
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


def _finish(
    state: ScaleState,
    current: int,
    now: float,
    events: list[tuple[float, int]],
    event_horizon: float,
    failures: int,
    failing_since: float | None,
    last_active: float | None,
    newest: float,
    reasons: list[Reason],
    metric_inputs: list[MetricInput],
    desired: int,
    bound_by: Rule,
    history: list[tuple[float, int]] | None,
    panic_since: float | None,
    panic_max: int,
    panic_over_at: float | None,
    actionable: bool,
) -> tuple[ScaleResult, ScaleState]:
    """The result and the next state; a decision to change is recorded as a scale event."""
    if actionable and desired != current:
        events = record_event(events, now, desired - current, now, event_horizon)
    new_state = ScaleState(
        state.recommendations if history is None else history,
        events,
        panic_since,
        panic_max,
        failures,
        last_active,
        desired if actionable else current,
        failing_since,
        panic_over_at,
    )
    result = ScaleResult(
        desired=desired,
        current=current,
        bound_by=bound_by,
        reasons=reasons,
        inputs=metric_inputs,
        newest_input=newest,
        actionable=actionable,
    )
    return result, new_state


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
    wl = inputs.workload
    observations = inputs.observations
    if wl is None:
        newest = max(
            (o.newest_sample for o in observations.values() if o.newest_sample is not None),
            default=0.0,
        )
        result = ScaleResult(
            desired=0,
            current=0,
            bound_by="no_workload_state",
            reasons=[Reason(rule="no_workload_state", detail="no state of the target seen yet")],
            inputs=[],
            newest_input=newest,
            actionable=False,
        )
        return result, state

    current = wl.spec_replicas
    ready = wl.ready_replicas
    compiled = _compile(policy)
    behavior = compiled.behavior
    tol = behavior.tolerances

    # Like HPA, a decision is recorded as a scale event when it is made (so it ages out of the
    # rate-limit period exactly as HPA's does). Whatever the target did instead — the decision
    # not applied yet, capped by capacity, or a manual change — shows up as a difference from the
    # expected replicas and is recorded as a correcting event: only the net change counts.
    events = state.scale_events
    expected = state.expected_replicas
    if expected is not None and expected != current:
        events = record_event(events, now, current - expected, now, behavior.event_horizon)
    elif events and events[0][0] <= now - behavior.event_horizon:
        events = record_event(events, now, 0, now, behavior.event_horizon)

    reasons: list[Reason] = []
    metric_inputs: list[MetricInput] = []
    zero = policy.scale_to_zero if policy.min_replicas == 0 else None

    best = -1
    best_rule: Rule = "metric"
    invalid = 0
    failing: list[_Metric] | None = None  # allocated only when a metric fails
    failing_age = 0.0
    panic_desired: int | None = None
    panic_metric: str | None = None
    active = False
    newest = 0.0
    all_within = True
    for m in compiled.metrics:
        name = m.name
        kind = m.kind
        target = m.target
        obs = observations.get(name)
        value = obs.stable if obs is not None else None
        sample_at = obs.newest_sample if obs is not None else None
        if sample_at is not None and sample_at > newest:
            newest = sample_at
        age = now - sample_at if sample_at is not None else 0.0
        if value is None or age > m.stale_after:
            if failing is None:
                failing = [m]
            else:
                failing.append(m)
            if age > failing_age:
                failing_age = age
            metric_inputs.append(
                MetricInput(
                    metric=name,
                    value=value,
                    target=target,
                    target_type=kind,
                    newest_sample=sample_at,
                    stale=True,
                )
            )
            continue
        assert obs is not None
        if zero is not None and not active:
            active = above_activation(zero, value) or above_activation(zero, obs.panic)
        desired = _metric_desired(kind, current, ready, value, target, tol)
        ratio = _ratio(kind, value, target, current)
        if desired is None:
            invalid += 1
            reasons.append(
                Reason(
                    rule="readiness",
                    metric=name,
                    detail=f"no ready replica reports {kind} ({ready} of {current} ready)",
                )
            )
            metric_inputs.append(
                MetricInput(
                    metric=name,
                    value=value,
                    target=target,
                    target_type=kind,
                    newest_sample=sample_at,
                )
            )
            continue
        rule: Rule = "metric"
        if current and ((ratio > 1.0 and desired < current) or (ratio < 1.0 and desired > current)):
            # The ready pods scale the ratio; when too few are ready the count can move against
            # the load's direction (HPA's External Value does): hold instead, as HPA does for
            # resource metrics ("a change in scale direction").
            rule = "readiness"
            detail = (
                f"ratio {ratio:.4g} over {ready} ready of {current} would give {desired}:"
                f" holds {current}"
            )
            desired = current
        elif kind == "Utilization" and desired == current and ready < current and ratio > 1.0:
            # HPA's unready rule: counting unready pods at 0 % left the change in the band or
            # flipped its direction.
            rule = "readiness"
            detail = (
                f"ratio {ratio:.4g} over {ready} ready; with {current - ready} unready at 0 %"
                f" no scale-up: holds {current}"
            )
        elif current and desired == current and tol.within(ratio):
            rule = "tolerance"
            detail = (
                f"ratio {ratio:.4g} within tolerance"
                f" [{1 - tol.down:.4g}, {1 + tol.up:.4g}]: holds {current}"
            )
        else:
            detail = f"{kind} {value:.4g}{m.vs_target}: ratio {ratio:.4g} → {desired}"
        if rule != "tolerance":
            all_within = False
        reasons.append(Reason(rule=rule, metric=name, value=ratio, detail=detail))
        metric_inputs.append(
            MetricInput(
                metric=name,
                value=value,
                target=target,
                target_type=kind,
                newest_sample=sample_at,
                desired=desired,
            )
        )
        if desired > best:
            best, best_rule = desired, rule
        if policy.panic is not None and obs.panic is not None:
            pd = raw_replicas(kind, current, ready, obs.panic, target)
            if panic_desired is None or pd > panic_desired:
                panic_desired, panic_metric = pd, name

    # --- missing or stale data and the fallback (staleness.py) ---------------------------------
    failures = 0
    failing_since: float | None = None
    if failing:
        failing_since = state.failing_since if state.failing_since is not None else now
        # Failures count evaluation steps, not calls: the decider also evaluates on every tick
        # and message, and KEDA's failureThreshold counts polls. One call per step (HPA, the
        # simulator) counts exactly as before.
        failures = max(state.failures, 1 + int((now - failing_since) // step_seconds))
        failing_for = max(now - failing_since, failing_age)
        fb = policy.fallback
        held = failing
        if fb is not None and fallback_due(fb, failures, failing_for):
            covered = [f.name for f in failing if f.fallback_ok]
            held = [f for f in failing if not f.fallback_ok]
            if covered:
                fr = fallback_replicas(fb, current)
                reasons.append(
                    Reason(
                        rule="fallback",
                        metric=",".join(covered),
                        detail=(
                            f"no fresh data for {failures} evaluations ({failing_for:.4g} s):"
                            f" fallback {fb.behavior} → {fr}"
                        ),
                    )
                )
                if fr > best:
                    best, best_rule = fr, "fallback"
                all_within = False
        if held:
            invalid += len(held)
            reasons.append(
                Reason(
                    rule="stale_hold",
                    metric=",".join(f.name for f in held),
                    detail=(
                        f"no fresh data for {failures} evaluations ({failing_for:.4g} s):"
                        " no scale-down on it"
                    ),
                )
            )

    # Everything below decides. One if/elif chain with a single exit: every branch sets the
    # outcome (no early returns through a closure, which would turn the locals into cells).
    last_active = state.last_active
    hi = policy.max_replicas
    cap_binds = False
    if policy.replica_cap is not None and policy.replica_cap < hi:
        hi, cap_binds = policy.replica_cap, True
    lo = policy.min_replicas if zero is None else 1
    if hi < lo:
        hi, cap_binds = lo, False
    cooled_down = False
    if zero is not None:
        idle = idle_check(zero, active or failing is not None, last_active, now)
        last_active, cooled_down = idle.last_active, idle.cooled_down

    # HPA's recordInitialRecommendation: the first sync of a target records its current
    # replicas, whatever that sync then decides (bounds, invalid metrics, disabled), so a later
    # stabilization window sees it exactly as long as HPA's does.
    history: list[tuple[float, int]] | None = None  # None: the history is left as it was
    if not state.recommendations and behavior.horizon > 0:
        history = [(now, current)]
    panic_since, panic_max, panic_over_at = state.panic_since, state.panic_max, state.panic_over_at
    actionable = True
    bound: Rule

    # --- the target's own state ---------------------------------------------------------------
    if zero is None and current == 0:
        desired, bound, actionable = 0, "disabled", False
        reasons.append(
            Reason(
                rule="disabled",
                detail="the target has 0 replicas and minReplicas > 0: scaling is disabled (HPA)",
            )
        )
    elif zero is not None and current == 0 and not active:
        desired, bound = 0, "activation"
        reasons.append(
            Reason(
                rule="activation",
                detail=(
                    f"no fresh metric above activation threshold"
                    f" {zero.activation_threshold:.4g}: stays at 0"
                ),
            )
        )
    elif zero is not None and current > 0 and cooled_down:
        assert last_active is not None
        desired, bound = 0, "scale_to_zero"
        reasons.append(
            Reason(
                rule="scale_to_zero",
                detail=(
                    f"no metric above activation threshold {zero.activation_threshold:.4g}"
                    f" for {now - last_active:.4g} s (cooldown {zero.cooldown_seconds:.4g} s):"
                    " to 0"
                ),
            )
        )
    elif current > hi:
        desired = hi
        bound = "cap" if cap_binds else "max"
        reasons.append(Reason(rule=bound, detail=f"current {current} above {bound} {hi}"))
    elif 0 < current < lo:
        desired, bound = lo, "min"
        reasons.append(Reason(rule="min", detail=f"current {current} below minReplicas {lo}"))

    # --- HPA's rule for invalid metrics ---------------------------------------------------------
    elif best < 0 or (invalid and best < current):
        desired = current
        bound = "stale_hold" if failing else "readiness"
        reasons.append(
            Reason(
                rule=bound,
                detail=(
                    f"{invalid} of {len(compiled.metrics)} metrics invalid"
                    + (f" and the rest ask for {best}" if best >= 0 else "")
                    + f": holds {current}"
                ),
            )
        )

    else:
        desired = best
        bound = "tolerance" if all_within and desired == current else best_rule
        if current == 0 and desired < 1:
            desired, bound = 1, "scale_to_zero"
            reasons.append(Reason(rule="scale_to_zero", detail="activation from 0: at least 1"))

        # --- panic (Knative) --------------------------------------------------------------------
        if policy.panic is not None:
            out = panic_step(
                policy.panic,
                stable_desired=desired,
                panic_desired=panic_desired,
                ready=ready,
                since=state.panic_since,
                over_at=state.panic_over_at,
                panic_max=state.panic_max,
                now=now,
            )
            panic_since, panic_max, panic_over_at = out.since, out.panic_max, out.over_at
            if out.entered:
                reasons.append(
                    Reason(
                        rule="panic",
                        metric=panic_metric,
                        detail=(
                            f"panic: the panic window asks {panic_desired} with {ready} ready"
                            f" (≥ {policy.panic.threshold_percent:.4g} %)"
                        ),
                    )
                )
            if out.exited:
                reasons.append(
                    Reason(
                        rule="panic",
                        detail=(
                            f"panic ends: under {policy.panic.threshold_percent:.4g} % for a"
                            f" stable window ({policy.panic.stable_window_seconds:.4g} s)"
                        ),
                    )
                )
            if out.since is not None:
                panicked = max(out.desired, current)
                if panicked != desired:
                    reasons.append(
                        Reason(
                            rule="panic",
                            metric=panic_metric,
                            detail=(
                                f"panicking for {now - out.since:.0f} s: panic window asks"
                                f" {panic_desired}, stable {desired}, never below"
                                f" {max(out.panic_max, current)}"
                            ),
                        )
                    )
                    desired, bound = panicked, "panic"

        # --- stabilization and rate limits (HPA behavior) ---------------------------------------
        past = state.recommendations if history is None else history
        st = stabilize(past, current, desired, now, behavior.up.window, behavior.down.window)
        history = record(past, desired, now, step_seconds, behavior.horizon)
        if st.replicas != desired:
            if desired < current or st.replicas > desired:
                detail = (
                    f"{compiled.down_window} holds {st.replicas}"
                    f" (max of recommendations) over {desired}"
                )
            else:
                detail = (
                    f"{compiled.up_window} holds {st.replicas}"
                    f" (min of recommendations) under {desired}"
                )
            reasons.append(Reason(rule="stabilization", detail=detail))
            desired, bound = st.replicas, "stabilization"

        limited = limit_rate(current, desired, lo, hi, events, behavior, now)
        if limited.rule is not None:
            rule2: Rule = limited.rule
            if rule2 == "max" and cap_binds:
                rule2 = "cap"
            if rule2 in ("rate_limit", "disabled"):
                direction = "scaleUp" if desired > current else "scaleDown"
                detail = _rate_detail(direction, current, limited.limit, behavior, events, now)
            elif rule2 == "min":
                detail = f"minReplicas {lo} holds {limited.replicas} over {desired}"
            else:
                detail = f"{rule2} {hi} holds {limited.replicas} under {desired}"
            reasons.append(Reason(rule=rule2, detail=detail))
            desired, bound = limited.replicas, rule2

        if current == 0 and desired < 1:
            # Percent-only policies cannot grow from 0; KEDA's 0 → 1 is a step of its own.
            desired, bound = 1, "scale_to_zero"
            reasons.append(Reason(rule="scale_to_zero", detail="activation: 0 → 1"))

    return _finish(
        state, current, now, events, behavior.event_horizon, failures, failing_since,
        last_active, newest, reasons, metric_inputs, desired, bound, history, panic_since,
        panic_max, panic_over_at, actionable,
    )  # fmt: skip
