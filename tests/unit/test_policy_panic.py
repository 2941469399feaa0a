"""Knative parity for panic mode: ports of knative/serving autoscaling/autoscaler_test.go.

Knative's concurrency target per pod is an AverageValue target here (dspc = ceil(stable/target),
dppc = ceil(panic/target)). To isolate Knative's semantics the policy turns HPA's damping off:
tolerance 0, no stabilization windows, rate limits far above anything the cases ask for; the
Knative cases never hit Knative's own rate limits either. Ready pods are Knative's endpoints.
"""

from __future__ import annotations

from typing import Any

from governor.policy import ScaleState
from governor.policy.panic import is_over, panic_step
from governor.spec import PanicSpec
from tests.unit.test_policy_support import metric, policy, rules, step

T0 = 50_000.0
STABLE_WINDOW = 60.0


def knative(target: float, **extra: Any) -> Any:
    up = rules(("Pods", 100_000, 1), window=0) | {"tolerance": 0}
    down = rules(("Percent", 100, 1), window=0) | {"tolerance": 0}
    return policy(
        metric("concurrency", "AverageValue", target),
        max_replicas=10_000,
        behavior={"scaleUp": up, "scaleDown": down},
        panic={"windowSeconds": 6, "stableWindowSeconds": STABLE_WINDOW, "thresholdPercent": 200},
        **extra,
    )


def test_TestAutoscalerPanicModeExponentialTrackAndStablize() -> None:
    spec = knative(1)
    state = ScaleState()
    r, state = step(spec, state, 1, T0, concurrency=(6, 6))
    assert r.desired == 6
    tm = T0 + 1
    r, state = step(spec, state, 6, tm, concurrency=(36, 36))
    assert (r.desired, state.panic_over_at) == (36, tm)
    tm += 1
    r, state = step(spec, state, 36, tm, concurrency=(216, 216))
    assert (r.desired, state.panic_over_at) == (216, tm)
    r, state = step(spec, state, 216, tm, concurrency=(1296, 1296))
    assert (r.desired, state.panic_over_at) == (1296, tm)
    r, state = step(spec, state, 1296, tm + 1, concurrency=(1296, 1296))
    assert r.desired == 1296


def test_TestAutoscalerPanicThenUnPanicScaleDown() -> None:
    spec = knative(10)
    state = ScaleState()
    r, state = step(spec, state, 1, T0, concurrency=(100, 100))
    assert r.desired == 10
    panic_time = T0 + 1
    r, state = step(spec, state, 10, panic_time, concurrency=(100, 1000))
    assert r.desired == 100
    assert r.bound_by == "panic"
    # Traffic dropped off, scale stays as we're still in panic (the pods are not up yet).
    r, state = step(spec, state, 10, panic_time + 30, concurrency=(1, 1))
    assert r.desired == 100
    assert r.bound_by == "panic"
    # Scale down after the stable window.
    r, state = step(spec, state, 10, panic_time + 61, concurrency=(1, 1))
    assert r.desired == 1
    assert state.panic_since is None
    assert any(x.rule == "panic" and "ends" in x.detail for x in r.reasons)


def test_TestAutoscalerUnpanicAfterSlowIncrease() -> None:
    spec = knative(1)
    state = ScaleState()
    start = T0
    r, state = step(spec, state, 10, start, concurrency=(11, 25))
    assert r.desired == 25
    assert state.panic_over_at == start
    # Half the stable window later, +15 pods, no longer over the threshold (41/40 < 2).
    tm = start + STABLE_WINDOW / 2
    r, state = step(spec, state, 40, tm, concurrency=(30, 41))
    assert r.desired == 41
    assert state.panic_over_at == start  # panic time does not move
    # Past the window (plus Knative's 2 s tick): panic ends, back to the stable count.
    tm += STABLE_WINDOW / 2 + 2
    r, state = step(spec, state, 55, tm, concurrency=(50, 56))
    assert r.desired == 50
    assert state.panic_since is None and state.panic_over_at is None


def test_TestAutoscalerExtendPanicWindow() -> None:
    spec = knative(1)
    state = ScaleState()
    r, state = step(spec, state, 10, T0, concurrency=(11, 25))
    assert r.desired == 25
    tm = T0 + STABLE_WINDOW / 2
    r, state = step(spec, state, 40, tm, concurrency=(30, 80))
    assert r.desired == 80
    assert state.panic_over_at == tm  # still surging: the panic window is extended
    assert state.panic_since == T0


def test_TestAutoscalerScale_AutoscalerPanicModeDoublePodCount() -> None:
    r, _ = step(knative(10), ScaleState(), 1, T0, concurrency=(50, 100))
    assert r.desired == 10  # panic concurrency takes precedence


def _in_panic(max_pods: int) -> ScaleState:
    return ScaleState(panic_since=T0 - 5, panic_over_at=T0 - 5, panic_max=max_pods)


def test_TestAutoscalerScale_AutoscalerPanicStableLargerThanPanic() -> None:
    r, _ = step(knative(1), _in_panic(5), 5, T0, concurrency=(50, 30))
    assert r.desired == 50  # the stable value is used when it is larger


def test_TestAutoscalerScale_AutoscalerPanicStableLessThanPanic() -> None:
    r, _ = step(knative(1), _in_panic(5), 5, T0, concurrency=(20, 30))
    assert r.desired == 30


def test_TestAutoscalerScale_AutoscalerStableModeNoChange() -> None:
    r, state = step(knative(10), ScaleState(), 1, T0, concurrency=(50, 50))
    # 5 pods wanted with 1 ready: 500 % of capacity, which is panic in Knative too.
    assert r.desired == 5
    r, state = step(knative(10), ScaleState(), 5, T0, concurrency=(50, 50))
    assert (r.desired, state.panic_since) == (5, None)


def test_TestAutoscalerStableModeDecrease() -> None:
    spec = knative(10)
    r, state = step(spec, ScaleState(), 8, T0, concurrency=(100, 100))
    assert r.desired == 10
    r, state = step(spec, state, 10, T0 + 1, concurrency=(50, 50))
    assert r.desired == 5


def test_panic_threshold_is_inclusive() -> None:
    spec = PanicSpec(threshold_percent=200)
    assert is_over(spec, 10, 5)
    assert not is_over(spec, 10, 6)
    assert is_over(spec, 2, 0)  # Knative counts at least one ready pod


def test_panic_never_decreases_while_panicking() -> None:
    spec = PanicSpec(stable_window_seconds=60, threshold_percent=200)
    out = panic_step(
        spec, stable_desired=3, panic_desired=20, ready=4, since=None, over_at=None, panic_max=0,
        now=T0,
    )  # fmt: skip
    assert (out.desired, out.entered, out.panic_max) == (20, True, 20)
    out = panic_step(
        spec, stable_desired=3, panic_desired=4, ready=20, since=out.since, over_at=out.over_at,
        panic_max=out.panic_max, now=T0 + 10,
    )  # fmt: skip
    assert (out.desired, out.panicking) == (20, True)


def test_panic_in_evaluate_never_scales_below_current() -> None:
    # Current is above what panic asks for (pods were added by hand): hold, never shrink.
    spec = knative(10)
    r, state = step(spec, _in_panic(5), 30, T0, concurrency=(40, 50))
    assert r.desired == 30
    assert state.panic_since is not None
