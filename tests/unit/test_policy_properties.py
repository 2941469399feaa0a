"""Properties of `evaluate` that must hold for any policy, history and load."""

from __future__ import annotations

import math
from typing import Any

import msgspec
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from governor.policy import ScaleResult, ScaleState, evaluate
from governor.spec import ScalingPolicySpec
from tests.unit.test_policy_support import inputs, metric, policy, rules

T0 = 1_000_000.0
STEP = 15.0

KINDS = ("AverageValue", "Value", "Utilization")


@st.composite
def policies(draw: st.DrawFn, *, zero: bool = True, fallback: bool = True) -> ScalingPolicySpec:
    kind = draw(st.sampled_from(KINDS))
    target = draw(st.sampled_from([10.0, 50.0, 100.0]))
    scale_to_zero = zero and draw(st.booleans())
    min_replicas = 0 if scale_to_zero else draw(st.integers(1, 4))
    max_replicas = draw(st.integers(max(1, min_replicas), 60))
    extra: dict[str, Any] = {}
    if scale_to_zero:
        extra["scaleToZero"] = {"activationThreshold": 1.0, "cooldownSeconds": 60.0}
    if draw(st.booleans()):
        extra["panic"] = {"windowSeconds": 6, "stableWindowSeconds": 60, "thresholdPercent": 200}
    if draw(st.booleans()):
        extra["replicaCap"] = draw(st.integers(1, 40))
    if fallback and draw(st.booleans()):
        extra["fallback"] = {
            "replicas": draw(st.integers(min_replicas, max_replicas)),
            "failureThreshold": draw(st.integers(1, 3)),
        }
    if draw(st.booleans()):
        extra["behavior"] = {
            "scaleUp": rules(
                (draw(st.sampled_from(["Pods", "Percent"])), draw(st.integers(1, 200)), 15),
                window=draw(st.sampled_from([0, 30])),
                select=draw(st.sampled_from(["Max", "Min"])),
            ),
            "scaleDown": rules(
                ("Percent", draw(st.integers(1, 100)), draw(st.sampled_from([15, 60]))),
                window=draw(st.sampled_from([0, 60, 300])),
            ),
        }
    return policy(
        metric("m", kind, target), min_replicas=min_replicas, max_replicas=max_replicas, **extra
    )


# Loads are drawn as the ratio to the target they mean at the current size, so that every region
# (below, inside, above the tolerance band; above the panic threshold) is reached.
loads = st.one_of(
    st.floats(min_value=0.0, max_value=6.0, allow_nan=False),
    st.floats(min_value=0.8, max_value=1.2, allow_nan=False),
)
# A load history: (stable, panic or None, data fresh?) per step.
histories = st.lists(
    st.tuples(loads, st.one_of(st.none(), loads), st.booleans()), min_size=0, max_size=25
)


def value(spec: ScalingPolicySpec, ratio: float, current: int) -> float:
    """The metric value that is `ratio` times the target for `current` replicas."""
    target = spec.metrics[0].target
    if target.type == "AverageValue":
        assert target.average_value is not None
        return ratio * target.average_value * max(1, current)
    per_pod = target.average_utilization if target.type == "Utilization" else target.value
    assert per_pod is not None
    return ratio * per_pod


def run(
    spec: ScalingPolicySpec, current: int, history: list[tuple[float, float | None, bool]]
) -> tuple[int, ScaleState, float]:
    """Replay a history, applying every actionable decision; the final current, state and time."""
    state = ScaleState()
    now = T0
    for stable_ratio, panic_ratio, fresh in history:
        stable = value(spec, stable_ratio, current)
        panic = None if panic_ratio is None else value(spec, panic_ratio, current)
        obs: Any = (stable, panic) if panic is not None else stable
        kw: dict[str, Any] = {"m": obs if fresh else None}
        result, state = evaluate(spec, inputs(current, now, ready=current, **kw), state, now)
        if result.actionable:
            current = result.desired
        now += STEP
    return current, state, now


# A policy replayed through a history: (spec, current, state, now).
Ran = tuple[ScalingPolicySpec, int, ScaleState, float]


@st.composite
def after_history(draw: st.DrawFn, *, fallback: bool = True) -> Ran:
    """Any policy (`policies`), replayed from 1..80 replicas through any history (`run`)."""
    spec = draw(policies(fallback=fallback))
    current, state, now = run(spec, draw(st.integers(1, 80)), draw(histories))
    return spec, current, state, now


def bounds(spec: ScalingPolicySpec) -> tuple[int, int]:
    hi = spec.max_replicas if spec.replica_cap is None else min(spec.max_replicas, spec.replica_cap)
    return spec.min_replicas, max(spec.min_replicas, hi)


def at(spec: ScalingPolicySpec, state: ScaleState, current: int, now: float, **kw: Any) -> Any:
    return evaluate(spec, inputs(current, now, ready=current, **kw), state, now)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ran=after_history(), load=loads)
def test_result_is_always_within_min_max_and_cap(ran: Ran, load: float) -> None:
    spec, current, state, now = ran
    result, _ = at(spec, state, current, now, m=value(spec, load, current))
    lo, hi = bounds(spec)
    if result.desired == 0:
        assert spec.scale_to_zero is not None and spec.min_replicas == 0
    else:
        assert max(lo, 1) <= result.desired <= hi
    assert result.reasons, "every result names its reasons"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ran=after_history(fallback=False),
    stale_by=st.floats(min_value=61.0, max_value=10_000.0),
    load=loads,
    missing=st.booleans(),
)
def test_no_scale_down_on_stale_or_missing_data(
    ran: Ran, stale_by: float, load: float, missing: bool
) -> None:
    spec, current, state, now = ran
    lo, hi = bounds(spec)
    assume(lo <= current <= hi and current > 0)
    observed = None if missing else value(spec, load, current)
    result, _ = evaluate(
        spec, inputs(current, now, sample_at=now - stale_by, m=observed), state, now
    )
    assert result.desired >= current
    assert result.inputs[0].stale


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ran=after_history(),
    a=loads,
    b=loads,
    panic_factor=st.one_of(st.none(), st.floats(min_value=0.0, max_value=3.0)),
)
def test_more_load_never_gives_fewer_replicas(
    ran: Ran, a: float, b: float, panic_factor: float | None
) -> None:
    low, high = sorted((a, b))
    spec, current, state, now = ran

    def obs(ratio: float) -> Any:
        x = value(spec, ratio, current)
        return x if panic_factor is None else (x, x * panic_factor)

    r_low, _ = at(spec, state, current, now, m=obs(low))
    r_high, _ = at(spec, state, current, now, m=obs(high))
    assert r_low.desired <= r_high.desired


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    n=st.integers(2, 40),
    noise=st.lists(st.floats(min_value=-0.09, max_value=0.09), min_size=1, max_size=60),
    with_panic=st.booleans(),
)
def test_constant_load_with_noise_inside_the_tolerance_never_changes(
    kind: str, n: int, noise: list[float], with_panic: bool
) -> None:
    target = 50.0
    extra: dict[str, Any] = {}
    if with_panic:
        extra["panic"] = {"windowSeconds": 6, "stableWindowSeconds": 60, "thresholdPercent": 200}
    spec = policy(metric("m", kind, target), max_replicas=100, **extra)
    state = ScaleState()
    now = T0
    for e in noise:
        # At the target per replica, times (1 + e): the ratio stays inside the band.
        per_replica = target * (1 + e)
        if kind == "Utilization":
            # HPA truncates the percentage: keep the truncated value inside the band too.
            per_replica = math.floor(per_replica)
            assume(0.9 <= per_replica / target <= 1.1)
        observed = per_replica * n if kind == "AverageValue" else per_replica
        r, state = at(spec, state, n, now, m=(observed, observed))
        assert r.desired == n, (kind, e, r)
        now += STEP


def _encode(x: ScaleResult | ScaleState) -> bytes:
    return msgspec.msgpack.encode(x)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ran=after_history(), load=loads)
def test_same_inputs_and_state_give_the_same_output(ran: Ran, load: float) -> None:
    spec, current, state, now = ran
    # Through the wire and back, as a decider restarting from its persisted state would.
    restored = msgspec.msgpack.decode(_encode(state), type=ScaleState)
    r1, s1 = at(spec, state, current, now, m=value(spec, load, current))
    r2, s2 = at(spec, restored, current, now, m=value(spec, load, current))
    assert _encode(r1) == _encode(r2)
    assert _encode(s1) == _encode(s2)


# The replay now runs while drawing: as slow to draw as the other properties.
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ran=after_history())
def test_history_stays_bounded(ran: Ran) -> None:
    _, _, state, _ = ran
    # 300 s at 15 s steps: at most two entries per bucket, plus the bucket being filled.
    assert len(state.rec_at) == len(state.rec_replicas) <= 2 * (300 / STEP + 1)
    assert len(state.scale_events) <= 2 * (60 / STEP + 1)
