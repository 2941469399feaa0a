"""governor.policy.staleness.frozen_scale_down: which decisions a frozen window may not make."""

from hypothesis import given
from hypothesis import strategies as st

from governor.policy.staleness import frozen_scale_down

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
