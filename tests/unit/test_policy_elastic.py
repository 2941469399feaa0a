"""policy.elastic: restart-aware damping of elastic training jobs (pure)."""

from __future__ import annotations

import math

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from governor.policy import elastic as el
from governor.spec import ElasticSpec

SPEC = ElasticSpec(
    floor=4, restart_penalty_seconds=30.0, scaling_efficiency=0.9, min_resize_interval_seconds=300
)
NOW = 10_000.0


def judge(
    current: int,
    target: int,
    *,
    want: int | None = None,
    state: el.ElasticState | None = None,
    now: float = NOW,
    restarts: int = 0,
    started_at: float | None = 0.0,
    spec: ElasticSpec = SPEC,
) -> tuple[el.Verdict, el.ElasticState]:
    return el.judge(
        spec,
        state or el.ElasticState(),
        current=current,
        target=target,
        want=target if want is None else want,
        floor=spec.floor,
        now=now,
        restarts=restarts,
        started_at=started_at,
    )


def test_speedup_is_a_power_law() -> None:
    assert el.speedup(0, 0.9) == 0.0
    assert el.speedup(1, 0.9) == 1.0
    assert el.speedup(8, 1.0) == 8.0
    assert el.speedup(2, 0.9) == pytest.approx(2**0.9)
    assert el.speedup_ratio(4, 8, 0.9) == pytest.approx(2**0.9)


def test_pollux_discount() -> None:
    # max(age − restarts·δ, 0) / (age + δ)
    assert el.discount(270.0, 0, 30.0) == pytest.approx(270 / 300)
    assert el.discount(270.0, 3, 30.0) == pytest.approx(180 / 300)
    assert el.discount(60.0, 5, 30.0) == 0.0
    assert el.discount(math.inf, 7, 30.0) == 1.0


def test_measured_throughput_replaces_the_model() -> None:
    measured = {4: 100.0, 8: 110.0}
    assert el.speedup_ratio(4, 8, 0.9, measured) == pytest.approx(1.1)
    # Only one side measured: the model's ratio.
    assert el.speedup_ratio(4, 6, 0.9, measured) == pytest.approx(1.5**0.9)


def test_no_change_is_kept_and_clears_a_pending_grow() -> None:
    pending = el.ElasticState(pending_since=1.0, pending_at=2.0, pending_loss=5.0)
    v, s = judge(8, 8, state=pending)
    assert (v.kind, v.replicas, v.reason) == ("keep", 8, None)
    assert s.pending_since is None and s.pending_loss == 0.0


def test_forced_shrink_is_never_damped() -> None:
    just_resized = el.ElasticState(last_resize_at=NOW - 1, resizes=3)
    v, _ = judge(12, 4, want=16, state=just_resized)
    assert v.kind == "apply" and v.forced and v.replicas == 4
    assert v.reason is None


def test_grow_up_to_the_floor_is_not_damped() -> None:
    v, _ = judge(2, 6, state=el.ElasticState(last_resize_at=NOW - 1))
    assert v.kind == "apply" and v.replicas == 6
    v, _ = judge(0, 3, state=el.ElasticState(last_resize_at=NOW - 1))
    assert v.kind == "apply"


def test_grow_within_the_interval_is_held_with_a_reason() -> None:
    v, s = judge(4, 12, state=el.ElasticState(last_resize_at=NOW - 100))
    assert v.kind == "hold" and v.replicas == 4
    assert v.reason is not None and v.reason.rule == "restart_damping"
    assert "minResizeIntervalSeconds 300" in v.reason.detail
    assert s.pending_since == NOW  # the wait is already being accounted


def test_voluntary_shrink_waits_for_the_interval_then_goes() -> None:
    recent = el.ElasticState(last_resize_at=NOW - 100)
    v, _ = judge(12, 8, want=8, state=recent)
    assert v.kind == "hold" and v.replicas == 12
    v, _ = judge(12, 8, want=8, state=recent, now=NOW + 200)
    assert v.kind == "apply" and v.replicas == 8 and not v.forced


def test_young_job_with_many_restarts_is_not_grown() -> None:
    # age 100 s, 3 restarts of δ 30 s: the discount after one more restart is 0.
    v, _ = judge(4, 5, now=NOW, started_at=NOW - 100, restarts=3)
    assert v.kind == "hold"
    assert v.reason is not None and "does not beat the restart" in v.reason.detail


def test_flat_measured_throughput_is_never_worth_a_restart() -> None:
    state = el.ElasticState(throughput={4: 100.0, 8: 100.0})
    v, _ = judge(4, 8, state=state, started_at=NOW - 1e6)
    assert v.kind == "hold"


def _grow_after(current: int, target: int, tick: float = 5.0) -> float:
    """Seconds a constant worthwhile grow waits (batching) before it is applied."""
    state = el.ElasticState()
    t = NOW
    while True:
        v, state = judge(current, target, state=state, now=t)
        if v.kind == "apply":
            return t - NOW
        assert v.reason is not None and "batching" in v.reason.detail
        t += tick


def test_batching_takes_a_large_gain_fast_and_lets_a_small_step_wait() -> None:
    big, small = _grow_after(4, 12), _grow_after(4, 5)
    # Break-even: waited·(ratio − 1) ≥ δ·ratio.
    ratio = (12 / 4) ** 0.9
    assert big == pytest.approx(math.ceil(30 * ratio / (ratio - 1) / 5) * 5)
    assert small > 3 * big


def test_batching_takes_the_latest_target() -> None:
    state = el.ElasticState()
    t, target = NOW, 5
    while True:
        v, state = judge(4, target, state=state, now=t)
        if v.kind == "apply":
            break
        target = min(12, target + 1)  # room frees one replica per tick
        t += 5
    assert v.replicas == 12


def test_resized_counts_and_clears_pending() -> None:
    s = el.resized(el.ElasticState(pending_since=1.0, pending_at=2.0, pending_loss=3.0), 50.0)
    assert (s.last_resize_at, s.resizes, s.pending_since, s.pending_loss) == (50.0, 1, None, 0.0)


def test_state_round_trips_msgpack() -> None:
    s = el.measured(el.resized(el.ElasticState(), 5.0), 8, 123.0)
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(s), type=el.ElasticState) == s


def test_measured_ignores_nonsense_and_is_bounded() -> None:
    s = el.ElasticState()
    assert el.measured(s, 0, 1.0) == s
    assert el.measured(s, 3, -1.0) == s
    for n in range(1, el.MAX_MEASURED + 10):
        s = el.measured(s, n, float(n))
    assert len(s.throughput) == el.MAX_MEASURED


# --- properties -------------------------------------------------------------------------------

specs = st.builds(
    ElasticSpec,
    floor=st.integers(0, 8),
    restart_penalty_seconds=st.floats(0, 600),
    scaling_efficiency=st.floats(0.05, 1.0),
    min_resize_interval_seconds=st.floats(0, 1200),
)
states = st.builds(
    el.ElasticState,
    last_resize_at=st.none() | st.floats(NOW - 5000, NOW),
    resizes=st.integers(0, 20),
    pending_since=st.none() | st.floats(NOW - 2000, NOW),
    pending_at=st.none() | st.floats(NOW - 2000, NOW),
    pending_loss=st.floats(0, 1000),
)


@settings(max_examples=400, deadline=None)
@given(
    spec=specs,
    state=states,
    current=st.integers(0, 32),
    target=st.integers(0, 32),
    want=st.integers(0, 32),
    restarts=st.integers(0, 20),
    age=st.none() | st.floats(0, 1e6),
)
def test_judge_properties(
    spec: ElasticSpec,
    state: el.ElasticState,
    current: int,
    target: int,
    want: int,
    restarts: int,
    age: float | None,
) -> None:
    v, after = el.judge(
        spec,
        state,
        current=current,
        target=target,
        want=want,
        floor=min(spec.floor, want),
        now=NOW,
        restarts=restarts,
        started_at=None if age is None else NOW - age,
    )
    # Only two answers: stay or go to the target.
    assert v.replicas in (current, target)
    assert (v.kind == "apply") == (v.replicas != current)
    # Every held resize says why, with the restart_damping rule; nothing else carries a reason.
    if v.kind == "hold":
        assert v.reason is not None and v.reason.rule == "restart_damping"
        assert v.replicas == current != target
    else:
        assert v.reason is None
    # Priority wins: a shrink the pool forces is always applied.
    if target < current and target < want:
        assert v.kind == "apply" and v.forced
    # The floor is a guarantee.
    if current < min(spec.floor, want) <= target:
        assert v.kind == "apply"
    # The wait's cost never goes negative; a decided or unneeded resize leaves nothing pending.
    assert after.pending_loss >= 0
    if v.kind != "hold":
        assert after.pending_since is None
    assert after.resizes == state.resizes


@settings(max_examples=200, deadline=None)
@given(
    e=st.floats(0.1, 1.0),
    delta=st.floats(1, 300),
    current=st.integers(1, 16),
    extra=st.integers(1, 16),
)
def test_batching_never_waits_longer_than_one_restart_costs(
    e: float, delta: float, current: int, extra: int
) -> None:
    """Ski rental: once a grow is possible and worth it, waiting costs at most one restart."""
    spec = ElasticSpec(
        floor=1, restart_penalty_seconds=delta, scaling_efficiency=e, min_resize_interval_seconds=0
    )
    target = current + extra
    ratio = el.speedup_ratio(current, target, e)
    state, t, tick = el.ElasticState(), NOW, 5.0
    while True:
        v, state = el.judge(
            spec, state, current=current, target=target, want=target, floor=1, now=t
        )
        if v.kind == "apply":
            break
        assert state.pending_loss <= delta * ratio + 1e-6
        t += tick
    waited = t - NOW
    assert waited * (ratio - 1) <= delta * ratio + tick * (ratio - 1) + 1e-6


@given(age=st.floats(0, 1e7), r=st.integers(0, 100), delta=st.floats(0, 1000))
def test_discount_is_a_fraction_falling_with_restarts(age: float, r: int, delta: float) -> None:
    d = el.discount(age, r, delta)
    assert 0.0 <= d <= 1.0
    assert el.discount(age, r + 1, delta) <= d
