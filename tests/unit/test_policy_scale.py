"""The composed scale policy (`evaluate`): HPA's controller rules, staleness and fallback (KEDA),
scale to zero (KEDA), caps, and that every result names what bound it."""

from __future__ import annotations

import msgspec
import pytest

from governor.policy import MetricObservation, ScaleInputs, ScaleState, evaluate
from governor.policy.staleness import DEFAULT_STALE_SECONDS
from tests.unit.test_policy_support import inputs, metric, policy, rules, step, workload

T0 = 90_000.0


def rules_of(result_reasons: list[msgspec.Struct]) -> list[str]:
    return [r.rule for r in result_reasons]  # type: ignore[attr-defined]


def test_no_workload_state_is_not_actionable() -> None:
    spec = policy()
    state = ScaleState(failures=2)
    obs = {"load": MetricObservation("load", 500.0, newest_sample=T0)}
    r, new_state = evaluate(spec, ScaleInputs(workload=None, observations=obs), state, T0)
    assert not r.actionable
    assert r.bound_by == "no_workload_state"
    assert r.newest_input == T0
    assert new_state is state


def test_target_at_zero_without_scale_to_zero_is_disabled_like_hpa() -> None:
    r, _ = step(policy(), ScaleState(), 0, T0, load=1000.0)
    assert (r.desired, r.bound_by, r.actionable) == (0, "disabled", False)


def test_current_above_max_goes_to_max_and_below_min_to_min() -> None:
    r, _ = step(policy(max_replicas=5), ScaleState(), 9, T0, load=900.0)
    assert (r.desired, r.bound_by) == (5, "max")
    r, _ = step(policy(min_replicas=3), ScaleState(), 2, T0, load=200.0)
    assert (r.desired, r.bound_by) == (3, "min")


def test_replica_cap_binds_and_never_undercuts_min() -> None:
    spec = policy(max_replicas=50, replicaCap=6)
    r, _ = step(spec, ScaleState(), 4, T0, load=4000.0)
    assert (r.desired, r.bound_by) == (6, "cap")
    r, _ = step(policy(min_replicas=4, max_replicas=50, replicaCap=2), ScaleState(), 4, T0,
                load=4000.0)  # fmt: skip
    assert r.desired == 4


# --- HPA documentation examples through the whole policy ---------------------------------------


def test_hpa_docs_1_replica_at_200m_vs_100m_goes_to_2() -> None:
    spec = policy(metric("cpu", "AverageValue", 0.1))
    r, _ = step(spec, ScaleState(), 1, T0, cpu=0.2)
    assert (r.desired, r.bound_by) == (2, "metric")


def test_hpa_docs_scale_down_policies_80_to_72_to_64() -> None:
    # behavior.scaleDown: Pods 4 / 60 s and Percent 10 / 60 s, the larger change wins.
    spec = policy(
        max_replicas=100,
        behavior={"scaleDown": rules(("Pods", 4, 60), ("Percent", 10, 60), window=0)},
    )
    state = ScaleState()
    r, state = step(spec, state, 80, T0, load=1000.0)  # wants 10
    assert (r.desired, r.bound_by) == (72, "rate_limit")
    assert "Percent 10/60s limits to 72" in r.reasons[-1].detail
    r, state = step(spec, state, 72, T0 + 15, load=1000.0)
    assert (r.desired, r.bound_by) == (72, "rate_limit")  # 8 already removed in this period
    r, state = step(spec, state, 72, T0 + 60, load=1000.0)
    assert r.desired == 64  # 10 % of 72 is 7.2: rounded to a removal of 8


def test_hpa_docs_scale_up_percent_900_allows_ten_times() -> None:
    spec = policy(max_replicas=1000, behavior={"scaleUp": rules(("Percent", 900, 60))})
    r, _ = step(spec, ScaleState(), 1, T0, load=100_000.0)
    assert (r.desired, r.bound_by) == (10, "rate_limit")


def test_hpa_docs_disabled_scale_down() -> None:
    spec = policy(behavior={"scaleDown": rules(window=0, select="Disabled")})
    r, _ = step(spec, ScaleState(), 10, T0, load=100.0)
    assert (r.desired, r.bound_by) == (10, "disabled")


def test_default_behavior_holds_scale_down_for_300_s_from_a_fresh_start() -> None:
    spec = policy()
    state = ScaleState()
    for t in range(0, 300, 15):
        r, state = step(spec, state, 10, T0 + t, load=500.0)
        assert (r.desired, r.bound_by) == (10, "stabilization")
    assert "stabilization window 300 s holds 10" in r.reasons[-1].detail
    r, state = step(spec, state, 10, T0 + 300, load=500.0)
    assert r.desired == 5


def test_default_scale_up_is_rate_limited_then_catches_up() -> None:
    spec = policy()
    r, state = step(spec, ScaleState(), 2, T0, load=3000.0)  # wants 30
    assert (r.desired, r.bound_by) == (6, "rate_limit")
    assert "Pods 4/15s limits to 6" in r.reasons[-1].detail
    r, state = step(spec, state, 6, T0 + 15, load=3000.0)
    assert r.desired == 12  # Percent 100 now allows more than Pods 4


def test_a_decision_not_applied_yet_does_not_eat_the_rate_limit() -> None:
    spec = policy()
    r, state = step(spec, ScaleState(), 2, T0, load=3000.0)
    assert r.desired == 6
    # The target has not moved yet: the same decision is repeated, not a smaller one.
    r, state = step(spec, state, 2, T0 + 1, load=3000.0)
    assert r.desired == 6
    r, state = step(spec, state, 6, T0 + 2, load=3000.0)
    assert r.desired == 6  # 2 → 6 happened inside this period
    r, state = step(spec, state, 6, T0 + 15.5, load=3000.0)
    assert r.desired == 12


def test_tolerance_reason_names_the_band() -> None:
    r, _ = step(policy(), ScaleState(), 10, T0, load=1070.0)
    assert (r.desired, r.bound_by) == (10, "tolerance")
    assert "ratio 1.07 within tolerance [0.9, 1.1]" in r.reasons[0].detail
    assert r.reasons[0].metric == "load"


def test_split_tolerance_through_behavior() -> None:
    spec = policy(
        metric("q", "Value", 100.0),
        behavior={"scaleUp": {"tolerance": 0.05}, "scaleDown": {"tolerance": 0.15, **rules(
            window=0)}},
    )  # fmt: skip
    assert step(spec, ScaleState(), 10, T0, q=106.0)[0].desired == 11
    assert step(spec, ScaleState(), 10, T0, q=86.0)[0].desired == 10
    assert step(spec, ScaleState(), 10, T0, q=84.0)[0].desired == 9


def test_every_result_carries_inputs_and_reasons() -> None:
    spec = policy(metric("a", "AverageValue", 100.0), metric("b", "Value", 50.0))
    r, _ = step(spec, ScaleState(), 4, T0, a=800.0, b=60.0)
    assert [i.metric for i in r.inputs] == ["a", "b"]
    assert [i.desired for i in r.inputs] == [8, 5]
    assert r.reasons
    assert r.desired == 8
    assert r.newest_input == T0


# --- several metrics, invalid metrics (HPA computeReplicasForMetrics) ---------------------------


def test_TestScaleUpOneMetricEmpty() -> None:
    spec = policy(
        metric("cpu", "Utilization", 30.0), metric("qps", "Value", 0.1),
        min_replicas=2, max_replicas=6,
    )  # fmt: skip
    # CPU 300/400/500 m of 1 core each: 40 %; the external metric fails.
    r, _ = step(spec, ScaleState(), 3, T0, cpu=40.0, qps=None)
    assert r.desired == 4


def test_TestNoScaleDownOneMetricEmpty() -> None:
    spec = policy(
        metric("cpu", "Utilization", 50.0), metric("qps", "Value", 1.0),
        min_replicas=2, max_replicas=6, behavior={"scaleDown": rules(window=0)},
    )  # fmt: skip
    r, state = step(spec, ScaleState(), 5, T0, cpu=28.0, qps=None)
    assert (r.desired, r.bound_by) == (5, "stale_hold")
    assert state.failures == 1
    # With both metrics valid the same CPU reading scales down (qps asks for 3 too).
    r, _ = step(spec, ScaleState(), 5, T0, cpu=28.0, qps=0.5)
    assert r.desired == 3
    # A metric inside its tolerance band holds current even when another says down.
    r, _ = step(spec, ScaleState(), 5, T0, cpu=28.0, qps=1.0)
    assert (r.desired, r.bound_by) == (5, "tolerance")


def test_readiness_guard_never_scales_against_the_load() -> None:
    # TestReplicaCalcScaleUpCMExternalIgnoresUnreadyPods gives 2 for 3 replicas under a ratio of
    # 1.95 (one ready pod); governor holds 3 instead of scaling down on a scale-up signal.
    spec = policy(metric("qps", "Value", 4.4))
    r, _ = step(spec, ScaleState(), 3, T0, ready=1, qps=8.6)
    assert (r.desired, r.bound_by) == (3, "readiness")


def test_utilization_with_no_ready_pod_holds() -> None:
    spec = policy(metric("cpu", "Utilization", 50.0))
    r, _ = step(spec, ScaleState(), 3, T0, ready=0, cpu=10.0)
    assert (r.desired, r.bound_by) == (3, "readiness")


# --- missing and stale data, fallback ----------------------------------------------------------


def test_stale_data_never_scales_down() -> None:
    spec = policy(behavior={"scaleDown": rules(window=0)})
    old = T0 - DEFAULT_STALE_SECONDS - 1
    r, state = step(spec, ScaleState(), 10, T0, sample_at=old, load=100.0)
    assert (r.desired, r.bound_by) == (10, "stale_hold")
    assert r.inputs[0].stale
    r, state = step(spec, state, 10, T0 + 15, sample_at=old, load=100.0)
    assert (r.desired, state.failures, state.failing_since) == (10, 2, T0)
    # Fresh again: the counter resets and the same load scales down.
    r, state = step(spec, state, 10, T0 + 30, load=100.0)
    assert (r.desired, state.failures, state.failing_since) == (1, 0, None)


def test_staleness_bound_is_three_source_intervals() -> None:
    spec = policy(
        metric(
            "lag",
            "AverageValue",
            10.0,
            source={
                "type": "kafka_lag",
                "topic": "t",
                "consumerGroup": "g",
                "intervalSeconds": 5.0,
            },
        )
    )
    r, _ = step(spec, ScaleState(), 4, T0, sample_at=T0 - 14.0, lag=80.0)
    assert r.bound_by != "stale_hold"
    r, _ = step(spec, ScaleState(), 4, T0, sample_at=T0 - 16.0, lag=0.0)
    assert r.bound_by == "stale_hold"


@pytest.mark.parametrize(
    ("behavior", "current", "expected"),
    [
        ("static", 10, 3),
        ("currentReplicas", 10, 10),
        ("currentReplicasIfHigher", 10, 10),
        ("currentReplicasIfHigher", 2, 3),
        ("currentReplicasIfLower", 10, 3),
        ("currentReplicasIfLower", 2, 2),
    ],
)
def test_fallback_after_failure_threshold(behavior: str, current: int, expected: int) -> None:
    spec = policy(
        fallback={"replicas": 3, "failureThreshold": 2, "behavior": behavior},
        behavior={"scaleDown": rules(window=0), "scaleUp": rules(("Pods", 100, 15))},
    )
    state = ScaleState()
    # One evaluation per 15 s step, as KEDA polls: failures count steps.
    for i in range(2):
        r, state = step(spec, state, current, T0 + 15 * i, load=None)
        assert (r.desired, r.bound_by) == (current, "stale_hold")
    r, state = step(spec, state, current, T0 + 30, load=None)
    assert r.desired == expected
    assert "fallback" in rules_of(r.reasons)
    assert state.failures == 3


def test_failures_count_steps_not_calls() -> None:
    """The decider evaluates on every tick: 1 s apart, the threshold still means steps."""
    spec = policy(
        fallback={"replicas": 3, "failureThreshold": 2},
        behavior={"scaleDown": rules(window=0), "scaleUp": rules(("Pods", 100, 15))},
    )
    state = ScaleState()
    for i in range(30):  # 30 calls within two 15 s steps
        r, state = step(spec, state, 10, T0 + i, load=None)
        assert r.bound_by == "stale_hold", i
    r, state = step(spec, state, 10, T0 + 30, load=None)  # the third step
    assert r.desired == 3
    assert "fallback" in rules_of(r.reasons)


def test_fallback_after_stale_after_seconds() -> None:
    spec = policy(
        fallback={"replicas": 4, "staleAfterSeconds": 30},
        behavior={"scaleDown": rules(window=0)},
    )
    state = ScaleState()
    r, state = step(spec, state, 8, T0, load=None)
    assert r.bound_by == "stale_hold"
    r, state = step(spec, state, 8, T0 + 31, load=None)
    assert r.desired == 4
    # Data 40 s old is beyond staleAfterSeconds at once.
    r, _ = step(spec, ScaleState(), 8, T0, sample_at=T0 - 40, load=100.0)
    assert r.desired == 4


# --- scale to zero (KEDA) -----------------------------------------------------------------------

ZERO = {"activationThreshold": 5.0, "cooldownSeconds": 120.0}


def test_activation_is_strictly_above_the_threshold() -> None:
    spec = policy(min_replicas=0, scaleToZero=ZERO)
    r, state = step(spec, ScaleState(), 0, T0, load=5.0)
    assert (r.desired, r.bound_by) == (0, "activation")
    r, state = step(spec, state, 0, T0 + 1, load=5.5)
    assert r.desired == 1
    r, state = step(spec, ScaleState(), 0, T0, load=350.0)
    assert r.desired == 4  # ceil(ratio) at zero, within the scale-up rate limit from 0 (Pods 4)


def test_activation_from_zero_with_percent_only_policy_still_reaches_one() -> None:
    spec = policy(min_replicas=0, scaleToZero=ZERO,
                  behavior={"scaleUp": rules(("Percent", 100, 15))})  # fmt: skip
    r, _ = step(spec, ScaleState(), 0, T0, load=50.0)
    assert r.desired == 1


def test_cooldown_then_zero() -> None:
    spec = policy(min_replicas=0, scaleToZero=ZERO)
    r, state = step(spec, ScaleState(), 3, T0, load=50.0)
    assert state.last_active == T0
    r, state = step(spec, state, 3, T0 + 60, load=1.0)
    assert r.desired >= 1
    r, state = step(spec, state, 3, T0 + 120, load=1.0)
    assert r.desired >= 1  # not strictly past the cooldown yet
    r, state = step(spec, state, 3, T0 + 121, load=1.0)
    assert (r.desired, r.bound_by) == (0, "scale_to_zero")


def test_stale_data_counts_as_active_and_never_collapses_to_zero() -> None:
    spec = policy(min_replicas=0, scaleToZero=ZERO)
    r, state = step(spec, ScaleState(last_active=T0 - 1000), 3, T0, load=None)
    assert r.desired == 3
    assert state.last_active == T0


def test_no_record_of_activity_starts_the_cooldown_instead_of_scaling_to_zero() -> None:
    spec = policy(min_replicas=0, scaleToZero=ZERO)
    r, state = step(spec, ScaleState(), 3, T0, load=0.0)
    assert r.desired == 3 and state.last_active == T0


def test_workload_state_from_the_helpers() -> None:
    # The helper reflects what a collector publishes: spec and ready replicas.
    w = workload(3, 2, T0)
    assert (w.spec_replicas, w.ready_replicas) == (3, 2)
    assert inputs(3, T0, load=1.0).observations["load"].newest_sample == T0


def test_evaluate_does_not_mutate_its_inputs() -> None:
    spec = policy()
    state = ScaleState(recommendations=((T0 - 30, 5),), scale_events=((T0 - 5, 2),))
    before = msgspec.msgpack.encode(state)
    step(spec, state, 5, T0, load=2000.0)
    assert msgspec.msgpack.encode(state) == before


def test_a_decision_that_is_never_applied_keeps_the_event_list_small() -> None:
    # E.g. the capacity stage keeps granting fewer replicas: every tick corrects and re-decides.
    spec = policy(behavior={"scaleUp": rules(("Pods", 4, 600))})
    r, state = step(spec, ScaleState(), 2, T0, load=3000.0)
    assert r.desired == 6
    for t in range(1, 300):
        r, state = step(spec, state, 2, T0 + t, load=3000.0)
        assert r.desired == 6
    assert state.scale_events == ((T0, 4),)


def test_spent_rate_budget_is_explained() -> None:
    # horizontal_test.go: "scaleUp with currentReplicas limitation with rate.PeriodSeconds with a
    # lot of recent scale up events", through the whole policy.
    spec = policy(max_replicas=1000, behavior={"scaleUp": rules(("Pods", 5, 120))})
    events = ((T0 - 100, 1), (T0 - 60, 5), (T0 - 20, 9))
    state = ScaleState(scale_events=events, expected_replicas=100)
    r, _ = step(spec, state, 100, T0, load=50_000.0)
    assert (r.desired, r.bound_by) == (100, "rate_limit")
    assert "used up their budget" in r.reasons[-1].detail


def test_entering_panic_is_explained() -> None:
    spec = policy(panic={"thresholdPercent": 200})
    r, state = step(spec, ScaleState(), 2, T0, load=(200.0, 1000.0))
    assert state.panic_since == T0
    assert any(x.rule == "panic" and "asks 10 with 2 ready" in x.detail for x in r.reasons)


def test_step_seconds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="step_seconds"):
        evaluate(policy(), inputs(1, T0, load=1.0), ScaleState(), T0, step_seconds=0)


def test_unready_pods_holding_a_scale_up_are_named() -> None:
    # TestReplicaCalcScaleUpUnreadyNoScale: 40 % on the one ready pod of 3, target 30 %.
    spec = policy(metric("cpu", "Utilization", 30.0))
    r, _ = step(spec, ScaleState(), 3, T0, ready=1, cpu=40.0)
    assert (r.desired, r.bound_by) == (3, "readiness")
    assert "2 unready at 0 %" in r.reasons[0].detail


# --- horizontal_test.go controller cases --------------------------------------------------------


def test_TestScaleUpRCImmediately() -> None:
    spec = policy(metric("cpu", "Utilization", 80.0), min_replicas=2, max_replicas=6)
    r, state = step(spec, ScaleState(), 1, T0, cpu=0.0)
    assert (r.desired, r.bound_by) == (2, "min")
    # reconcileAutoscaler calls recordInitialRecommendation before the bounds check.
    assert (state.rec_at, state.rec_replicas, state.recommendations) == ((T0,), (1,), ())


def test_initial_recommendation_ages_from_the_first_sync() -> None:
    # Found by tests/integration/test_hpa_diff.py: the first sync goes straight to minReplicas;
    # 437 s later a 122 s scale-up window must not hold the scale-up at the current replicas
    # (HPA's initial recommendation dates from the first sync, not from the first metric one).
    spec = policy(
        metric("cpu", "Utilization", 60.0),
        min_replicas=5,
        max_replicas=9,
        behavior={"scaleUp": rules(window=122)},
    )
    r, state = step(spec, ScaleState(), 1, T0, cpu=60.0)
    assert (r.desired, r.bound_by) == (5, "min")
    r, _ = step(spec, state, 5, T0 + 437, cpu=190.0)
    assert (r.desired, r.bound_by) == (9, "max")


def test_TestScaleDownRCImmediately() -> None:
    spec = policy(metric("cpu", "Utilization", 50.0), min_replicas=2, max_replicas=5)
    r, _ = step(spec, ScaleState(), 6, T0, cpu=616.0)
    assert (r.desired, r.bound_by) == (5, "max")


def test_TestStabilizeDownscale() -> None:
    spec = policy(metric("cpu", "Utilization", 100.0), max_replicas=5)
    state = ScaleState(rec_at=(T0 - 600, T0 - 60), rec_replicas=(10, 4))
    r, state = step(spec, state, 4, T0, cpu=50.0)
    assert (r.desired, r.bound_by) == (4, "stabilization")
    assert state.rec_replicas == (4, 2)


def test_a_checkpoint_of_the_pair_layout_is_read_as_the_flat_one() -> None:
    # ScaleState before the flat history: (time, replicas) pairs first, nothing after
    # merge_since (array_like, so by position). A decider restoring one must decide the same.
    spec = policy(metric("cpu", "Utilization", 100.0), max_replicas=5)
    old = msgspec.msgpack.encode([[[T0 - 600, 10], [T0 - 60, 4]], [[T0 - 5, 2]], None, 0, 0])
    restored = msgspec.msgpack.decode(old, type=ScaleState)
    assert restored.recommendations == ((T0 - 600, 10), (T0 - 60, 4))
    flat = ScaleState(rec_at=(T0 - 600, T0 - 60), rec_replicas=(10, 4), scale_events=((T0 - 5, 2),))
    got, got_state = step(spec, restored, 4, T0, cpu=50.0)
    want, want_state = step(spec, flat, 4, T0, cpu=50.0)
    assert got == want
    assert got_state == want_state
    assert got_state.recommendations == ()  # written in the flat layout only
    assert got_state.rec_replicas == (4, 2)


def test_TestNoBackoffUpscaleCMNoBackoffCpu() -> None:
    spec = policy(
        metric("cpu", "Utilization", 10.0),
        metric("qps", "AverageValue", 15.0),
        max_replicas=5,
    )
    # CPU 20/10/30 cores on 1-core requests: 2000 %; qps 60 in total.
    r, _ = step(spec, ScaleState(), 3, T0, cpu=2000.0, qps=60.0)
    assert (r.desired, r.bound_by) == (5, "max")


def test_no_fallback_for_resource_metrics_like_keda() -> None:
    spec = policy(
        metric("cpu", "Utilization", 50.0, source={"type": "resource", "resource": "cpu"}),
        fallback={"replicas": 9, "failureThreshold": 1},
        max_replicas=20,
    )
    state = ScaleState()
    for t in range(3):
        r, state = step(spec, state, 4, T0 + t, cpu=None)
        assert (r.desired, r.bound_by) == (4, "stale_hold")
    assert "fallback" not in rules_of(r.reasons)


def test_a_resource_metric_allows_for_the_metrics_apis_whole_second_timestamps() -> None:
    from governor.policy.staleness import stale_after
    from governor.spec import policy_from_obj

    spec = policy_from_obj(
        {"apiVersion": "governor.dev/v1alpha1", "kind": "ScalingPolicy",
         "metadata": {"name": "w", "namespace": "ns"},
         "spec": {"targetRef": {"kind": "Deployment", "name": "w"}, "maxReplicas": 5,
                  "metrics": [
                      {"name": "cpu", "source": {"type": "resource", "resource": "cpu",
                                                 "intervalSeconds": 0.5},
                       "target": {"type": "Value", "value": 1.4}},
                      {"name": "q", "source": {"type": "prometheus", "query": "up",
                                               "intervalSeconds": 0.5},
                       "target": {"type": "Value", "value": 1}}]}}
    ).spec  # fmt: skip
    cpu, q = spec.metrics
    assert stale_after(spec, cpu) == 2.5  # 3 intervals + the API's 1 s timestamp resolution
    assert stale_after(spec, q) == 1.5


def _every(spec: object, loads: list[tuple[float, float]], current: int) -> list[tuple[float, int]]:
    """Evaluations at (trace time, load) in order, the target following every decision: what
    the decider does between its steps (on every window and tick)."""
    state, out = ScaleState(), []
    for t, load in loads:
        r, state = step(spec, state, current, T0 + t, load=load)  # type: ignore[arg-type]
        current = r.desired
        out.append((t, current))
    return out


_DOWN_60 = {"scaleUp": rules(window=0), "scaleDown": rules(("Percent", 100, 15), window=60)}


def test_continuous_evaluation_scales_down_when_hpas_sync_would() -> None:
    # One sample per step, as HPA's sync takes: the evaluations after the step's first that did
    # not move the count do not stretch its entry, so 10 leaves the 60 s window at T0 + 60 (it
    # was held to T0 + 72.5 when every evaluation stamped the bucket).
    spec = policy(behavior=_DOWN_60)
    loads = [(0.0, 1000.0)] + [(i * 2.5, 600.0) for i in range(1, 40)]
    counts = dict(_every(spec, loads, current=10))
    assert counts[57.5] == 10
    assert counts[60.0] == 6


def test_a_scale_up_between_steps_is_held_for_the_whole_window() -> None:
    # The count the policy moved to is recorded even mid-step: no flapping back at the next
    # evaluation, and the hold runs 60 s from the scale-up itself.
    spec = policy(behavior=_DOWN_60)
    loads = [(0.0, 600.0), (5.0, 900.0)] + [(5.0 + i * 2.5, 600.0) for i in range(1, 30)]
    counts = _every(spec, loads, current=6)
    assert all(c == 9 for t, c in counts if 5.0 <= t < 65.0)
    assert dict(counts)[65.0] == 6
