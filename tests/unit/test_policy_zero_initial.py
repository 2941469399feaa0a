"""Scale to zero's first cooldown: with no activity seen yet, a policy goes to zero only after
the longer of cooldownSeconds and initialCooldownSeconds (KEDA's initialCooldownPeriod), counted
from its first evaluation; once activity was seen, only cooldownSeconds counts."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from governor.policy.zero import idle_check
from governor.spec import ScaleToZeroSpec


def first_zero(spec: ScaleToZeroSpec, start: float, step: float = 1.0) -> float:
    """When an idle workload, first evaluated at `start`, is first allowed to go to zero."""
    last: float | None = None
    now = start
    while True:
        idle = idle_check(spec, False, last, now)
        if idle.cooled_down:
            return now
        last = idle.last_active
        now += step


def test_initial_cooldown_longer_than_cooldown_delays_the_first_zero() -> None:
    spec = ScaleToZeroSpec(cooldown_seconds=60, initial_cooldown_seconds=300)
    assert first_zero(spec, 1000.0) == 1301.0
    assert first_zero(ScaleToZeroSpec(cooldown_seconds=60), 1000.0) == 1061.0


def test_a_shorter_initial_cooldown_never_shortens_the_first_wait() -> None:
    spec = ScaleToZeroSpec(cooldown_seconds=60, initial_cooldown_seconds=10)
    assert first_zero(spec, 1000.0) == 1061.0


def test_after_activity_only_the_cooldown_counts() -> None:
    spec = ScaleToZeroSpec(cooldown_seconds=60, initial_cooldown_seconds=300)
    busy = idle_check(spec, True, None, 1000.0)
    assert busy.last_active == 1000.0
    assert not idle_check(spec, False, busy.last_active, 1060.0).cooled_down
    assert idle_check(spec, False, busy.last_active, 1061.0).cooled_down


@given(
    st.floats(min_value=0, max_value=600),
    st.one_of(st.none(), st.floats(min_value=0, max_value=900)),
)
def test_the_first_zero_is_never_before_the_longer_wait(
    cooldown: float, initial: float | None
) -> None:
    spec = ScaleToZeroSpec(cooldown_seconds=cooldown, initial_cooldown_seconds=initial)
    wait = max(cooldown, initial or 0.0)
    at = first_zero(spec, 0.0, step=7.0)
    assert wait < at <= wait + 7.0
