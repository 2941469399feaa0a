"""The forecast (predictive headroom) and the event-reduction steps: properties and reasons."""

from __future__ import annotations

import math
from collections.abc import Iterator

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from governor.events import WorkloadState
from governor.inventory.objects import Pod
from governor.inventory.targets import startup_durations
from governor.policy import MetricObservation, ScaleInputs, ScaleState, evaluate
from governor.policy import forecast as fc
from governor.policy.startup import estimate
from governor.policy.types import ScaleResult
from governor.spec import (
    Behavior,
    EventReductionSpec,
    ForecastSpec,
    HPAScalingRules,
    MetricSpec,
    MetricTarget,
    PolicyError,
    ScalingPolicySpec,
    TargetRef,
    hpa_compatible,
)

STEP = 15.0
TARGET = 10.0


def _policy(
    forecast: bool = True, reduce: bool = False, q: float = 0.9, peak: float = 100.0
) -> ScalingPolicySpec:
    return ScalingPolicySpec(
        target_ref=TargetRef(kind="Deployment", name="w"),
        max_replicas=500,
        metrics=[
            MetricSpec(name="load", target=MetricTarget(type="AverageValue", average_value=TARGET))
        ],
        forecast=ForecastSpec(quantile=q, peak_percent=peak) if forecast else None,
        event_reduction=EventReductionSpec() if reduce else None,
    )


def _inputs(load: float, replicas: int, now: float) -> ScaleInputs:
    return ScaleInputs(
        workload=WorkloadState(
            workload="ns/Deployment/w",
            spec_replicas=replicas,
            ready_replicas=replicas,
            observed_at=now,
        ),
        observations={"load": MetricObservation(metric="load", stable=load, newest_sample=now)},
    )


Step = tuple[ScaleInputs, ScaleState, float, int]


def _alongside(
    on: ScalingPolicySpec, off: ScalingPolicySpec, series: list[float], replicas: int
) -> Iterator[tuple[float, Step, ScaleResult, ScaleResult]]:
    """`on` scales the target along `series`; at each step `off` is evaluated from the same
    inputs and state. Yields (load, (inputs, state, now, current replicas), on's, off's)."""
    state = ScaleState()
    for i, load in enumerate(series):
        now = 1_000.0 + STEP * i
        inputs = _inputs(load, replicas, now)
        result, next_state = evaluate(on, inputs, state, now)
        reactive, _ = evaluate(off, inputs, state, now)
        yield load, (inputs, state, now, replicas), result, reactive
        state, replicas = next_state, result.desired


loads = st.lists(st.floats(min_value=0, max_value=2000, allow_nan=False), min_size=1, max_size=60)


@settings(max_examples=80, deadline=None)
@given(series=loads, peak=st.sampled_from([100.0, 115.0, 143.0, 400.0]), reduce=st.booleans())
def test_the_forecast_never_lowers_below_the_reactive_recommendation(
    series: list[float], peak: float, reduce: bool
) -> None:
    on = _policy(forecast=True, reduce=reduce, peak=peak)
    for _, _, with_fc, reactive in _alongside(on, hpa_compatible(on), series, 1):
        assert with_fc.desired >= reactive.desired
        if with_fc.bound_by == "forecast":
            assert any(
                r.rule == "forecast"
                and "forecast: p90 of load over next 75 s" in r.detail
                and (peak == 100.0 or f"(at {peak:.4g} % of the target per replica)" in r.detail)
                for r in with_fc.reasons
            )


@settings(max_examples=60, deadline=None)
@given(series=loads, peak=st.sampled_from([101.0, 115.0, 143.0, 400.0]), reduce=st.booleans())
def test_a_higher_peak_percent_never_asks_for_more_replicas(
    series: list[float], peak: float, reduce: bool
) -> None:
    """peakPercent divides the forecast's floor and its scale-down gate: from the same state and
    inputs the count is never above the one at the target (100), never below the reactive one."""
    at_target, hotter = _policy(reduce=reduce), _policy(reduce=reduce, peak=peak)
    reactive = hpa_compatible(at_target)
    for _, (inputs, state, now, _), base, hot in _alongside(at_target, hotter, series, 1):
        plain, _ = evaluate(reactive, inputs, state, now)
        assert plain.desired <= hot.desired <= base.desired


def test_peak_percent_below_the_target_is_rejected_naming_the_field() -> None:
    with pytest.raises(PolicyError, match="peakPercent"):
        ForecastSpec(peak_percent=90.0)


@settings(max_examples=40, deadline=None)
@given(
    level=st.floats(min_value=0, max_value=5000, allow_nan=False),
    q=st.sampled_from([0.5, 0.8, 0.9, 0.99]),
)
def test_a_constant_load_converges_to_no_headroom(level: float, q: float) -> None:
    """Constant load: every growth sample is exactly 1, so the quantile is 1 and the floor is the
    reactive count itself (no headroom beyond the error quantile, which is 0)."""
    policy = _policy(q=q)
    state, replicas = ScaleState(), max(1, math.ceil(level / TARGET))
    for i in range(40):
        now = 1_000.0 + STEP * i
        result, state = evaluate(policy, _inputs(level, replicas, now), state, now)
        replicas = result.desired
    assert state.forecasts is not None
    fs = state.forecasts["load"]
    assert fs.up == 1.0 and fs.down == 1.0
    assert replicas == max(1, math.ceil(level / TARGET - 1e-9))
    assert result.bound_by != "forecast"


@settings(max_examples=40, deadline=None)
@given(series=loads, reduce=st.booleans())
def test_results_are_deterministic_for_the_same_inputs_and_state(
    series: list[float], reduce: bool
) -> None:
    policy = _policy(reduce=reduce)
    state, replicas = ScaleState(), 3
    for i, load in enumerate(series):
        now = 1_000.0 + STEP * i
        inputs = _inputs(load, replicas, now)
        a, sa = evaluate(policy, inputs, state, now)
        b, sb = evaluate(policy, inputs, state, now)
        assert a == b and sa == sb
        state, replicas = sa, a.desired


def test_a_volatile_series_gets_more_headroom_than_a_regular_one() -> None:
    def headroom(series: list[float]) -> float:
        fs = fc.ForecastState()
        for i, load in enumerate(series):
            fs = fc.observe(fs, load, STEP * i, STEP, 5, 0.9, 0.99, 21600.0)
        return fs.up

    regular = [10.0 + (i % 2) * 0.1 for i in range(400)]
    # It changes every step (no quiet stretches to learn from), with a spike every 7 steps.
    volatile = [10.0 * (3 if i % 7 == 0 else 1) + i * 1e-3 for i in range(400)]
    assert headroom(regular) < headroom(volatile)
    assert headroom(regular) <= 1.05


def test_one_sample_per_step_however_often_it_is_evaluated() -> None:
    fs = fc.observe(fc.ForecastState(), 5.0, 100.0, STEP, 5, 0.9, 0.99, 3600.0)
    assert fc.observe(fs, 50.0, 110.0, STEP, 5, 0.9, 0.99, 3600.0) is fs
    assert fc.observe(fs, 50.0, 115.0, STEP, 5, 0.9, 0.99, 3600.0).loads == (5.0, 50.0)


def test_state_stays_small() -> None:
    policy, state, replicas = _policy(reduce=True), ScaleState(), 1
    for i in range(500):
        now = 1_000.0 + STEP * i
        result, state = evaluate(
            policy, _inputs(100 + 90 * math.sin(i / 7), replicas, now), state, now
        )
        replicas = result.desired
    assert len(msgspec.json.encode(state)) <= 4096


def test_event_reduction_waits_for_a_full_step_and_names_its_rule() -> None:
    no_window = Behavior(scale_down=HPAScalingRules(stabilization_window_seconds=0))
    policy = msgspec.structs.replace(_policy(forecast=True, reduce=True), behavior=no_window)
    state = ScaleState()
    for i in range(30):  # a steady 200 → 20 replicas
        now = 1_000.0 + STEP * i
        _, state = evaluate(policy, _inputs(200.0, 20, now), state, now)
    now = 1_000.0 + STEP * 30
    small, _ = evaluate(policy, _inputs(195.0, 20, now), state, now)
    assert small.desired == 20  # one replica fewer is under 10 %: merged
    assert small.bound_by in ("event_reduction", "tolerance")
    big, _ = evaluate(policy, _inputs(100.0, 20, now), state, now)
    assert big.desired < 20


def test_startup_estimate_is_the_median_and_p90_of_the_newest() -> None:
    assert estimate([]) == (None, None)
    assert estimate([60.0]) == (60.0, 60.0)
    assert estimate([float(i) for i in range(1, 11)]) == (5.0, 9.0)
    assert estimate([1000.0] + [30.0] * 32) == (30.0, 30.0)  # older than the newest 32


def test_the_collector_learns_startup_from_pods() -> None:
    def pod(created: str, ready: str | None) -> Pod:
        status: dict[str, object] = {"phase": "Running", "conditions": []}
        if ready is not None:
            status["conditions"] = [
                {"type": "Ready", "status": "True", "lastTransitionTime": ready}
            ]
        return msgspec.convert(
            {"metadata": {"name": "p", "creationTimestamp": created}, "status": status}, Pod
        )

    pods = [
        pod("2026-01-01T00:01:00Z", "2026-01-01T00:02:30Z"),
        pod("2026-01-01T00:00:00Z", "2026-01-01T00:00:45Z"),
        pod("2026-01-01T00:03:00Z", None),  # not ready yet: no start-up known
    ]
    assert startup_durations(pods) == [45.0, 90.0]


def test_a_bursty_load_keeps_replicas_between_bursts_and_names_the_burst() -> None:
    no_window = Behavior(scale_down=HPAScalingRules(stabilization_window_seconds=0))
    policy = msgspec.structs.replace(_policy(forecast=True, reduce=True), behavior=no_window)
    state, replicas = ScaleState(), 1
    held: list[int] = []
    for i in range(200):  # a 200-load burst (20 replicas) every 12 steps, zero in between
        now = 1_000.0 + STEP * i
        load = 200.0 if i % 12 < 2 else 0.0
        result, state = evaluate(policy, _inputs(load, replicas, now), state, now)
        if i % 12 == 6:  # mid-gap: the load is zero
            held.append(result.desired)
            assert any("recent burst" in r.detail for r in result.reasons) or result.desired >= 10
        replicas = result.desired
    assert min(held[2:]) >= 10  # without the burst level it falls to the minimum


def test_the_burst_level_decays_and_is_the_load_without_memory() -> None:
    fs = fc.ForecastState()
    for i, load in enumerate([30.0, 0.0, 0.0, 0.0]):
        fs = fc.observe(fs, load, STEP * i, STEP, 5, 0.9, 0.99, 3600.0, 2 * STEP)
    assert math.isclose(fs.level, 30.0 * 2.0 ** (-3 * STEP / (2 * STEP)))
    plain = fc.ForecastState()
    for i, load in enumerate([30.0, 0.0]):
        plain = fc.observe(plain, load, STEP * i, STEP, 5, 0.9, 0.99, 3600.0)
    assert plain.level == 0.0


@settings(max_examples=300, deadline=None)
@given(
    counts=st.lists(
        st.floats(min_value=0, max_value=1e12, allow_nan=False), min_size=fc.BINS, max_size=fc.BINS
    ),
    q1=st.floats(min_value=0.01, max_value=0.99),
    q2=st.floats(min_value=0.01, max_value=0.99),
)
def test_the_one_scan_quantiles_are_the_cumulative_ones(
    counts: list[float], q1: float, q2: float
) -> None:
    import itertools

    cumulative = list(itertools.accumulate(counts))
    expected = (fc.quantile(cumulative, q1), fc.quantile(cumulative, q2))
    assert fc.quantiles(counts, q1, q2) == expected


@settings(max_examples=2000, deadline=None)
@given(
    counts=st.lists(
        st.one_of(
            # small whole numbers and halves: exact ties between a cumulative sum and q x total
            st.integers(min_value=0, max_value=4).map(float),
            st.sampled_from([0.0, 0.5, 1.5]),
            st.floats(min_value=0, max_value=1e12, allow_nan=False),
        ),
        min_size=fc.BINS,
        max_size=fc.BINS,
    ),
    q=st.one_of(
        st.sampled_from([0.25, 0.5, 0.75, 0.8, 0.9, 0.95, 0.99]),
        st.floats(min_value=0.01, max_value=0.99),
    ),
    # the top bin has a search of its own (a spiky load's quantiles sit there): weighted up
    near=st.one_of(st.just(fc.BINS - 1), st.integers(min_value=0, max_value=fc.BINS - 1)),
)
def test_the_quantile_searched_from_the_last_one_is_the_cumulative_one(
    counts: list[float], q: float, near: int
) -> None:
    import itertools

    expected = fc.quantile(list(itertools.accumulate(counts)), q)
    edge = fc.EDGES[near]  # bin `near`'s upper edge
    assert fc.quantile_near(counts, sum(counts), q, edge) == expected


def _growth_bin(ratio: float) -> int:
    """The bin `observe` counts one growth sample of `ratio` in (read back from the counts)."""
    state = fc.ForecastState()
    for i, load in enumerate([10.0, (10.0 + fc.HALF) * ratio - fc.HALF]):
        state = fc.observe(state, load, STEP * i, STEP, 1, 0.75, 0.95, 3600.0)
    (b,) = [i for i, c in enumerate(state.counts) if c]
    return b


@settings(max_examples=500, deadline=None)
@given(ratio=st.floats(min_value=1.0, max_value=8.0))
def test_a_growth_sample_lands_in_the_bin_whose_edges_hold_it(ratio: float) -> None:
    b = _growth_bin(ratio)
    load = (10.0 + fc.HALF) * ratio - fc.HALF
    grown = (load + fc.HALF) / (10.0 + fc.HALF)  # the ratio as observe computes it
    assert grown <= fc.EDGES[b] * (1 + 1e-12) or b == fc.BINS - 1
    assert b == 0 or grown > fc.EDGES[b - 1] * (1 - 1e-12)


def test_a_slowly_growing_series_reads_a_small_growth_not_the_first_bins_edge() -> None:
    """+1 % per step: the p75 growth is the split first bin's 1.45 %, not +4.4 %."""
    state = fc.ForecastState()
    for i in range(200):
        state = fc.observe(state, 100.0 * 1.01**i, STEP * i, STEP, 1, 0.75, 0.95, 3600.0)
    assert 1.01 < state.up <= fc.EDGES[1]


def test_a_checkpoint_from_before_the_split_starts_its_histogram_again() -> None:
    old = fc.ForecastState(
        at=0.0, loads=(10.0, 10.0), counts=(5.0,) * 33, weight=3.0, total=165.0, levels=(10.0, 10.0)
    )
    state = fc.observe(old, 20.0, STEP, STEP, 1, 0.75, 0.95, 3600.0)
    assert len(state.counts) == fc.BINS and sum(state.counts) == state.total == 1.0


def _steady(policy: ScalingPolicySpec, load: float, replicas: int, steps: int) -> ScaleState:
    state = ScaleState()
    for i in range(steps):
        now = 1_000.0 + STEP * i
        _, state = evaluate(policy, _inputs(load, replicas, now), state, now)
    return state


def test_a_small_scale_down_merges_for_at_most_merge_seconds() -> None:
    no_window = Behavior(scale_down=HPAScalingRules(stabilization_window_seconds=0))
    # A 25 % step: with HPA's 10 % tolerance any scale-down outside the band is a 10 % one.
    reduce = EventReductionSpec(merge_seconds=60.0, min_step_percent=25.0)
    policy = msgspec.structs.replace(
        _policy(forecast=True), behavior=no_window, event_reduction=reduce
    )
    state = _steady(policy, 200.0, 20, 30)
    held = []
    for i in range(30, 40):  # 170 asks 17 of 20: under the 25 % step, merged, then it happens
        now = 1_000.0 + STEP * i
        result, state = evaluate(policy, _inputs(170.0, 20, now), state, now)
        held.append(result.desired)
        if result.desired < 20:
            break
    assert held[0] == 20 and held[-1] == 17
    assert 60.0 <= STEP * (len(held) - 1) <= 60.0 + STEP
    assert any("merged for" in r.detail for r in result.reasons)


def _in_the_band(reduce: EventReductionSpec | None) -> list[int]:
    """20 replicas at 200, then 186 for ten steps: a ratio of 0.93 over 20, inside HPA's 0.1
    tolerance, while the metric alone asks 19."""
    no_window = Behavior(scale_down=HPAScalingRules(stabilization_window_seconds=0))
    policy = msgspec.structs.replace(
        _policy(forecast=True), behavior=no_window, event_reduction=reduce
    )
    state = _steady(policy, 200.0, 20, 30)
    out = []
    for i in range(30, 40):
        now = 1_000.0 + STEP * i
        result, state = evaluate(policy, _inputs(186.0, 20, now), state, now)
        out.append(result.desired)
    return out


def test_the_tolerance_band_holds_only_for_band_seconds_with_event_reduction() -> None:
    released = _in_the_band(EventReductionSpec(band_seconds=60.0))
    assert released[0] == 20 and released[-1] == 19
    assert 60.0 <= STEP * released.index(19) <= 60.0 + STEP
    # mergeSeconds bounds merged small scale-downs only: the band's spare replica stays (the
    # release would be an event HPA never makes on a smooth load).
    assert _in_the_band(EventReductionSpec(merge_seconds=60.0)) == [20] * 10
    assert _in_the_band(None) == [20] * 10  # without event reduction the band holds for ever


def test_band_seconds_is_named_when_invalid() -> None:
    with pytest.raises(PolicyError, match="bandSeconds"):
        EventReductionSpec(band_seconds=-1.0)


def _gated(gate_seconds: float | None) -> ScalingPolicySpec:
    no_window = Behavior(scale_down=HPAScalingRules(stabilization_window_seconds=0))
    reduce = EventReductionSpec(down_quantile=0.9, gate_seconds=gate_seconds)
    # A low floor quantile: what holds the replicas after the fall is the gate, not the floor.
    return msgspec.structs.replace(
        _policy(forecast=True, q=0.3), behavior=no_window, event_reduction=reduce
    )


def _after_a_volatile_stretch(policy: ScalingPolicySpec) -> tuple[ScaleState, int]:
    """Loads that double every other step: a fat growth tail, so the gate is far above need."""
    state, replicas = ScaleState(), 10
    for i in range(60):
        now = 1_000.0 + STEP * i
        result, state = evaluate(policy, _inputs(100.0 * (1 + i % 2), replicas, now), state, now)
        replicas = result.desired
    return state, replicas


def test_the_forecast_gate_holds_a_scale_down_for_at_most_gate_seconds() -> None:
    held_for_ever, gated = _gated(None), _gated(120.0)
    for policy in (held_for_ever, gated):
        state, replicas = _after_a_volatile_stretch(policy)
        counts, reasons = [], []
        for i in range(60, 80):  # the load falls to a tenth and stays
            now = 1_000.0 + STEP * i
            result, state = evaluate(policy, _inputs(20.0, replicas, now), state, now)
            counts.append(result.desired)
            reasons += [r.detail for r in result.reasons if r.rule == "event_reduction"]
            replicas = result.desired
        if policy is held_for_ever:
            assert counts[-1] > 2  # the gate keeps the growth tail's replicas
        else:
            # Held 120 s (8 steps) since it was first asked, then down to what the load needs.
            assert counts[:8] == [counts[0]] * 8 and counts[0] > 2
            assert counts[-1] == 2
            assert any("held it for 120 s (gateSeconds 120)" in d for d in reasons)


def test_peak_percent_and_gate_seconds_are_named_when_invalid() -> None:
    with pytest.raises(PolicyError, match="gateSeconds"):
        EventReductionSpec(gate_seconds=-1.0)


reductions = st.builds(
    EventReductionSpec,
    down_quantile=st.sampled_from([0.6, 0.9, 0.95, 0.99]),
    min_step_percent=st.sampled_from([0.0, 10.0, 25.0]),
    merge_seconds=st.sampled_from([None, 0.0, 45.0, 300.0]),
    band_seconds=st.sampled_from([None, 0.0, 60.0]),
    gate_seconds=st.sampled_from([None, 0.0, 60.0]),
)


def _walk(start: float, moves: list[float]) -> list[float]:
    out = [start]
    for m in moves:
        out.append(out[-1] * m)
    return out


# Slow walks with plateaus (a few % a step) reach the tolerance band and the small moves the
# merges are for; the wild series reach the gate and the rate limits.
walks = st.builds(
    _walk,
    st.floats(min_value=20, max_value=2000, allow_nan=False),
    st.lists(
        st.sampled_from([1.0, 1.0, 1.0, 0.99, 0.97, 0.93, 1.02, 1.05]), min_size=1, max_size=60
    ),
)


@settings(max_examples=120, deadline=None)
@given(series=st.one_of(loads, walks), reduce=reductions, down_window=st.sampled_from([0, 300]))
def test_every_event_reduction_rule_keeps_the_reactive_floor_names_itself_and_is_deterministic(
    series: list[float], reduce: EventReductionSpec, down_window: int
) -> None:
    """The gate, the merge of small moves (bounded or not) and the tolerance merge, with any
    parameters: the count is never below the reactive (HPA-compatible) one (with bandSeconds:
    below its tolerance band, never below what the metric asks without it), never above current
    when event reduction binds (it only holds or shortens a scale-down), every binding has its
    reason, and the same inputs and state give the same result and state."""
    behavior = Behavior(scale_down=HPAScalingRules(stabilization_window_seconds=down_window))
    on = msgspec.structs.replace(_policy(), behavior=behavior, event_reduction=reduce)
    for load, (inputs, state, now, replicas), result, reactive in _alongside(
        on, hpa_compatible(on), series, 3
    ):
        floor = reactive.desired
        if reduce.band_seconds is not None:
            # The tolerance merge (by design): HPA's band holds a count only for bandSeconds,
            # then it drops to what the metric asks without the band, never below that.
            floor = min(floor, max(1, math.ceil(load / TARGET - 1e-9)))
        assert result.desired >= floor
        if result.bound_by == "event_reduction":
            assert result.desired <= replicas
            assert any(r.rule == "event_reduction" for r in result.reasons)
        again = evaluate(on, inputs, state, now)
        assert again[0] == result and again == evaluate(on, inputs, state, now)
