"""The metric collector's core (no I/O): offers are delivered as they came, a source's up/down
changes are worth one log line each, and a slow poll skips its missed slots."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from governor.cores.collector import CollectorCore, Offered, SourceHealth, next_poll
from governor.events import MetricSample


def sample(value: float) -> MetricSample:
    return MetricSample(workload="shop/Deployment/web", metric="rps", value=value, timestamp=1.0)


def test_an_offer_is_delivered_whole_and_an_empty_one_not_at_all() -> None:
    core: CollectorCore[str] = CollectorCore()
    offer = Offered([sample(1.0), sample(2.0)], "ticket", "0")
    assert core.on(offer).records == [offer]
    assert not core.on(Offered([], "t", "1"))
    assert not core.tick(5.0)


def test_health_logs_each_change_once() -> None:
    h = SourceHealth()
    assert h.published(), "the first success is worth a line (up, from never)"
    assert not h.published()
    assert h.failed("unreachable")
    assert not h.failed("unreachable"), "the same failure every poll: one line"
    assert h.failed("bad_response")
    assert h.published()


@given(st.lists(st.one_of(st.none(), st.sampled_from(["a", "b"])), max_size=40))
def test_health_says_changed_exactly_when_the_state_changes(events: list[str | None]) -> None:
    h = SourceHealth()
    state: str | None = "never"
    for reason in events:
        changed = h.published() if reason is None else h.failed(reason)
        assert changed == (reason != state)
        state = reason
        assert h.last == state


@given(
    st.floats(0, 1e6, allow_nan=False),
    st.floats(0.01, 100, allow_nan=False),
    st.floats(0, 1e6, allow_nan=False),
)
def test_next_poll_is_one_interval_on_but_never_in_the_past(
    next_at: float, interval: float, now: float
) -> None:
    at = next_poll(next_at, interval, now)
    assert at >= now and at >= next_at + interval
    assert at in (now, next_at + interval)
