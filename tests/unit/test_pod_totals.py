"""Per-instant cross-pod totals (governor.pod_totals) and the policy's use of them: a change in
the ready count inside a window must not change the replicas the same load asks for."""

from __future__ import annotations

import math

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from governor import pod_totals as pt
from governor import windows as w
from governor.events import LoadWindow, WorkloadState
from governor.policy.recommend import observe
from governor.policy.scale import evaluate
from governor.policy.types import ScaleInputs, ScaleState
from governor.spec import MetricSpec, MetricTarget, ScalingPolicySpec, TargetRef

TARGET = 7.0


def _samples(pods_at: list[int], load: float) -> list[tuple[float, str, float]]:
    """One instant a second: the `n` ready pods of that second each report load / n."""
    return [
        (float(t) + 0.25, f"pod-{i}", load / n) for t, n in enumerate(pods_at) for i in range(n)
    ]


def _window(samples: list[tuple[float, str, float]], start: float, end: float) -> LoadWindow:
    """The stable window as the aggregator publishes it: plain statistics plus the totals."""
    acc = w.WindowAcc(start=start, end=end)
    for ts, _, value in samples:
        acc = w.add_sample(acc, value, ts, w.DEFAULT_MAX_SAMPLES)
    view = w.to_load_window(acc, "ns/Deployment/web", "rps", "stable", closed=False)
    return pt.with_totals(view, pt.add_samples(pt.PodTotals(horizon=3600), samples))


@settings(max_examples=200, deadline=None)
@given(
    pods_at=st.lists(st.integers(1, 40), min_size=1, max_size=60),
    load=st.floats(min_value=0.1, max_value=1e4, allow_nan=False),
)
def test_any_change_in_pod_count_at_constant_load_gives_a_constant_total(
    pods_at: list[int], load: float
) -> None:
    samples = _samples(pods_at, load)
    t = pt.over(pt.add_samples(pt.PodTotals(horizon=3600), samples), 0.0, float(len(pods_at)))
    assert t is not None and t.instants == len(pods_at)
    for stat in (t.mean, t.max, t.p95):
        assert math.isclose(stat, load, rel_tol=1e-9)


def test_a_pod_scraped_twice_in_an_instant_counts_once_with_its_last_value() -> None:
    totals = pt.add_samples(pt.PodTotals(), [(10.1, "a", 3.0), (10.2, "b", 4.0), (10.6, "a", 5.0)])
    assert pt.over(totals, 10.0, 11.0) == pt.Totals(instants=1, mean=9.0, max=9.0, p95=9.0)
    # Across batches too, and the earlier state is left as it was (a value).
    later = pt.add_samples(totals, [(10.9, "b", 1.0), (11.0, "b", 2.0)])
    assert pt.over(later, 10.0, 11.0) == pt.Totals(instants=1, mean=6.0, max=6.0, p95=6.0)
    assert pt.over(later, 10.0, 12.0) == pt.Totals(instants=2, mean=4.0, max=6.0, p95=6.0)
    assert pt.over(totals, 10.0, 11.0) == pt.Totals(instants=1, mean=9.0, max=9.0, p95=9.0)


def test_buckets_behind_the_horizon_are_dropped_and_windows_see_only_their_own() -> None:
    totals = pt.add_samples(
        pt.PodTotals(horizon=10), [(float(t), "a", float(t)) for t in range(100)]
    )
    assert min(totals.buckets) == 89.0  # the bounded state: buckets reaching past 99 - 10
    assert pt.over(totals, 95.0, 97.0) == pt.Totals(instants=2, mean=95.5, max=96.0, p95=96.0)
    assert pt.over(totals, 0.0, 50.0) is None
    assert pt.with_totals(_window([(1.0, "a", 1.0)], 0, 60), None).instants == 1
    # A series without per-pod samples has no totals: the window is left as it is.
    bare = w.to_load_window(w.WindowAcc(start=0, end=6), "x", "m", "panic", closed=False)
    assert pt.with_totals(bare, pt.PodTotals()) is bare
    assert pt.total_statistic(bare, "mean") is None


def test_the_totals_survive_the_wire_and_old_readers_see_plain_windows() -> None:
    win = _window(_samples([5] * 30 + [20] * 30, 200.0), 0.0, 60.0)
    back = msgspec.json.decode(msgspec.json.encode(win), type=LoadWindow)
    assert back == win and back.instants == 60 and math.isclose(back.total_mean, 200.0)
    assert [pt.total_statistic(back, a) for a in ("mean", "max", "p95")] == [
        back.total_mean,
        back.total_max,
        back.total_p95,
    ]
    old = msgspec.json.decode(msgspec.json.encode(win), type=w.WindowView)  # ignores nothing
    assert old.instants == 60


def test_per_pod_value_by_target_type() -> None:
    assert pt.per_pod_value("Value", 16.0, 200.0, 20) == 10.0
    assert pt.per_pod_value("Utilization", 16.0, 200.0, 20) == 10.0
    assert pt.per_pod_value("AverageValue", 16.0, 200.0, 20) == 200.0
    assert pt.per_pod_value("Value", 16.0, None, 20) == 16.0  # not a per-pod series
    assert pt.per_pod_value("Value", 16.0, 200.0, 0) == 16.0  # nobody ready to divide by


def _policy() -> ScalingPolicySpec:
    return ScalingPolicySpec(
        target_ref=TargetRef(kind="Deployment", name="web"),
        max_replicas=500,
        metrics=[MetricSpec(name="rps", target=MetricTarget(type="Value", value=TARGET))],
    )


def _desired(win: LoadWindow, ready: int) -> int:
    """The metric's own desired count (before HPA's default rate limit of 2× per 15 s)."""
    policy = _policy()
    workload = WorkloadState(
        workload=win.workload, spec_replicas=ready, ready_replicas=ready, observed_at=win.end
    )
    obs = observe(policy, {("rps", "stable"): win})
    result, _ = evaluate(policy, ScaleInputs(workload, obs), ScaleState(), win.end)
    (metric,) = result.inputs
    assert metric.desired is not None
    return metric.desired


def test_five_then_twenty_ready_pods_in_one_window_ask_for_what_the_load_needs() -> None:
    """The demo's overshoot: the sample-weighted mean (16 rps) × 20 ready asks 1.6× the need."""
    load = 200.0
    win = _window(_samples([5] * 30 + [20] * 30, load), 0.0, 60.0)
    assert math.isclose(win.mean, 16.0)  # what the plain window says per pod
    need = math.ceil(load / TARGET)
    assert _desired(win, 20) == need
    stripped = msgspec.structs.replace(win, instants=0)
    assert _desired(stripped, 20) == math.ceil(16.0 / TARGET * 20) > 1.5 * need


@settings(max_examples=150, deadline=None)
@given(
    pods_at=st.lists(st.integers(1, 30), min_size=1, max_size=60),
    ready=st.integers(1, 60),
    load=st.floats(min_value=1.0, max_value=1000.0, allow_nan=False),
)
def test_desired_depends_on_the_load_not_on_when_pods_became_ready(
    pods_at: list[int], ready: int, load: float
) -> None:
    win = _window(_samples(pods_at, load), 0.0, 60.0)
    desired = _desired(win, ready)
    ratio = load / (ready * TARGET)
    if 0.9 <= ratio <= 1.1:  # HPA's tolerance, over the ready pods of now
        assert desired == ready
    else:
        assert abs(desired - math.ceil(load / TARGET)) <= 1  # float rounding at the ceiling


def test_the_aggregators_load_message_carries_the_totals_on_every_view() -> None:
    from governor.cores.aggregator import load_message

    samples = _samples([5] * 30 + [20] * 30, 200.0)
    totals = pt.add_samples(pt.PodTotals(horizon=70), samples)
    stable, panic = w.WindowAcc(start=0.0, end=60.0), w.WindowAcc(start=54.0, end=60.0)
    for ts, _, value in samples:
        stable = w.add_sample(stable, value, ts, w.DEFAULT_MAX_SAMPLES)
        if ts >= 54.0:
            panic = w.add_sample(panic, value, ts, w.DEFAULT_MAX_SAMPLES)
    msg = load_message("ns/Deployment/web", "rps", [("stable", stable)], [("panic", panic)], totals)
    assert msg is not None
    first, second = w.views(msg)
    assert (first.instants, second.instants) == (60, 6)
    assert math.isclose(first.total_mean, 200.0) and math.isclose(second.total_mean, 200.0)
    plain = load_message("ns/Deployment/web", "rps", [("stable", stable)], [])
    assert plain is not None and plain.instants == 0


def test_which_samples_belong_to_a_per_pod_series() -> None:
    from governor.events import MetricSample

    def smp(labels: dict[str, str]) -> MetricSample:
        return MetricSample(workload="w", metric="m", value=2.5, timestamp=7.0, labels=labels)

    assert pt.pod_sample(smp({"pod": "web-1"})) == (7.0, "web-1", 2.5)
    # The resource source's mean over 4 pods: the instant's total is its `total` label.
    assert pt.pod_sample(smp({"pods": "4", "total": "10.0"})) == (7.0, pt.ALL_PODS, 10.0)
    for labels in ({}, {"pod": ""}, {"total": "nan"}, {"total": "x"}, {"list": "jobs"}):
        assert pt.pod_sample(smp(labels)) is None
