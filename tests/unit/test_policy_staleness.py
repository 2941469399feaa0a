"""governor.policy.staleness: which decisions a frozen window may not make (frozen_scale_down),
and when input running late holds a scale-down (lag_floor, hold_late)."""

from hypothesis import given
from hypothesis import strategies as st

from governor.events import Reason
from governor.policy.staleness import LAG_RELAX, frozen_scale_down, hold_late, lag_floor
from governor.policy.types import ScaleResult

counts = st.integers(0, 50)
times = st.floats(0.0, 1e6)


@given(current=counts, to=counts, desired=counts, last_to=st.none() | counts, newest=times,
       last_change=times)  # fmt: skip
def test_only_a_data_driven_decrease_on_inputs_no_newer_than_the_last_change_is_held(
    current: int, to: int, desired: int, last_to: int | None, newest: float, last_change: float
) -> None:
    held = frozen_scale_down(current, to, desired, last_to, newest, last_change)
    if to >= current or to < desired or to == last_to or newest > last_change or newest == 0.0:
        assert not held
    else:
        assert held


def test_a_newer_sample_releases_the_hold() -> None:
    assert frozen_scale_down(10, 5, 5, 10, newest=100.0, last_change=100.0)
    assert not frozen_scale_down(10, 5, 5, 10, newest=100.5, last_change=100.0)


def result(desired: int, current: int) -> ScaleResult:
    reasons = [Reason(rule="metric")]
    return ScaleResult(desired, current, "metric", reasons, [], newest_input=1.0)


@given(desired=counts, current=counts, late_by=st.floats(-1e3, 1e3), bound=st.floats(0.0, 100.0))
def test_only_a_scale_down_on_late_input_is_held_and_it_holds_current(
    desired: int, current: int, late_by: float, bound: float
) -> None:
    r = hold_late(result(desired, current), late_by, bound)
    if desired < current and late_by > bound:
        assert (r.desired, r.bound_by) == (current, "stale_hold")
        assert "later than usual" in (r.reasons[-1].detail or "")
    else:
        assert r == result(desired, current)


def late_by(lags: list[float], step: float) -> list[float]:
    """How late each of `lags` (one evaluation every `step` s) is behind the floor before it."""
    floor, out = None, []
    for i, lag in enumerate(lags):
        new = lag_floor(floor, (i - 1) * step, lag, i * step)
        out.append(0.0 if floor is None else lag - new)
        floor = new
    return out


@given(offset=st.floats(-1e4, 1e4), jitter=st.lists(st.floats(0.0, 15.0), min_size=1),
       step=st.floats(0.1, 15.0))  # fmt: skip
def test_a_steady_offset_with_jitter_below_the_bound_is_never_late(
    offset: float, jitter: list[float], step: float
) -> None:
    # Samples every <= 15 s: the lag is the offset plus at most one interval.
    assert max(late_by([offset + j for j in jitter], step)) <= 15.0 + 1e-6


@given(offset=st.floats(-1e4, 1e4), step=st.floats(0.1, 5.0), stall=st.floats(40.0, 600.0))
def test_input_that_stops_is_late_by_all_but_the_relaxation(
    offset: float, step: float, stall: float
) -> None:
    n = int(stall / step)
    lags = [offset] * 10 + [offset + k * step for k in range(1, n + 1)]
    assert late_by(lags, step)[-1] >= (1 - LAG_RELAX) * n * step - 1e-6
