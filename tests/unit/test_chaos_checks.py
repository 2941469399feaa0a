"""The chaos run's checks (tests/chaos/checks.py) on hand-built records: each can fail."""

from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from governor import events
from tests.chaos.checks import (
    ClosedWindow,
    Reference,
    SpecSample,
    Verdict,
    convergence,
    duplicate_patches,
    lost_windows,
    older_input,
    scale_downs_on_missing_data,
    seq_regressions,
    unaudited,
)

WL = "demo/Deployment/web-00"


def act(
    seq: int, at: float, outcome: events.ActuationOutcome = "applied", wl: str = WL
) -> events.Actuation:
    return events.Actuation(
        decision_id=f"{wl}:{seq}", workload=wl, seq=seq, outcome=outcome, reason="", at=at
    )


def decision(at: float, frm: int, to: int, rule: events.Rule = "metric") -> events.ScaleDecision:
    return events.ScaleDecision(
        decision_id=f"d{at}", workload=WL, seq=int(at), from_replicas=frm, to_replicas=to,
        reasons=[events.Reason(rule=rule)], inputs=[], policy_generation=1, newest_input=at,
        decided_at=at,
    )  # fmt: skip


def flat(n: int) -> Reference:
    return lambda _wl, _t: n


def test_a_window_no_decider_read_is_lost() -> None:
    closed = [ClosedWindow(WL, "stable", 0.0, 12.0), ClosedWindow(WL, "panic", 6.0, 12.0),
              ClosedWindow(WL, "stable", 10.0, 22.0)]  # fmt: skip
    every = {w.key for w in closed}
    assert lost_windows(closed, every, until=30.0) == 0
    assert lost_windows(closed, every - {(WL, "panic", 6.0)}, until=30.0) == 1
    assert lost_windows(closed, set(), until=30.0) == 3
    # windows closing after `until` are not due yet
    assert lost_windows(closed, {(WL, "stable", 0.0), (WL, "panic", 6.0)}, until=20.0) == 0
    # the same window of another workload does not count
    assert lost_windows(closed, {("x/Deployment/y", "stable", 0.0)}, until=12.0) == 2


def test_a_seq_applied_twice_is_a_duplicate() -> None:
    assert duplicate_patches([act(1, 1.0), act(2, 2.0)]) == 0
    assert duplicate_patches([act(1, 1.0), act(1, 2.0), act(1, 3.0)]) == 2
    # refusals and no-ops of the same seq are not patches
    assert duplicate_patches([act(1, 1.0), act(1, 2.0, "noop"), act(1, 3.0, "refused")]) == 0
    assert duplicate_patches([act(1, 1.0), act(1, 1.0, wl="demo/Deployment/b")]) == 0


def test_a_seq_going_back_is_a_regression() -> None:
    assert seq_regressions([act(1, 1.0), act(3, 2.0), act(4, 3.0)]) == 0
    assert seq_regressions([act(3, 1.0), act(2, 2.0)]) == 1
    samples = [SpecSample(1.0, WL, 2, 5), SpecSample(2.0, WL, 2, None), SpecSample(3.0, WL, 2, 4)]
    assert seq_regressions([], samples) == 1
    assert seq_regressions([], [SpecSample(1.0, WL, 2, 4), SpecSample(2.0, WL, 2, 5)]) == 0


def test_scale_down_on_missing_data_during_the_fault() -> None:
    ref = flat(5)
    # a fallback scale-down inside the fault is counted, outside it is not
    assert scale_downs_on_missing_data([decision(15.0, 5, 1, "fallback")], 10.0, 20.0, ref) == 1
    assert scale_downs_on_missing_data([decision(25.0, 5, 1, "fallback")], 10.0, 20.0, ref) == 0
    # below the reference by more than the tolerance
    assert scale_downs_on_missing_data([decision(15.0, 6, 3)], 10.0, 20.0, ref) == 1
    # down to what the reference asks: the load called for it
    assert scale_downs_on_missing_data([decision(15.0, 8, 4)], 10.0, 20.0, ref) == 0
    assert scale_downs_on_missing_data([decision(15.0, 2, 6)], 10.0, 20.0, ref) == 0
    # the pool's allocation cut it (a node left the pool): capacity, not data
    assert scale_downs_on_missing_data([decision(15.0, 8, 5, "priority")], 10.0, 20.0, ref) == 0
    assert scale_downs_on_missing_data([decision(15.0, 8, 5, "capacity")], 10.0, 20.0, ref) == 0


def test_a_decision_on_older_input_than_the_last_is_counted() -> None:
    def d(seq: int, newest: float) -> events.ScaleDecision:
        return msgspec.structs.replace(decision(float(seq), 1, 2), seq=seq, newest_input=newest)

    assert older_input([d(1, 10.0), d(2, 12.0), d(3, 12.0)]) == 0
    assert older_input([d(1, 10.0), d(2, 12.0), d(3, 11.0)]) == 1
    assert older_input([d(3, 11.0), d(1, 10.0), d(2, 12.0)]) == 1  # seq order, not arrival


def test_an_applied_seq_without_its_actuation_is_unaudited() -> None:
    samples = [SpecSample(1.0, WL, 2, 1), SpecSample(2.0, WL, 3, 2)]
    assert unaudited(samples, [act(1, 1.0), act(2, 2.0)]) == 1 - 1
    assert unaudited(samples, [act(1, 1.0)]) == 1
    # the replay of a decision applied by an actuator killed before its audit send
    assert unaudited(samples, [act(1, 1.0), act(2, 9.0, "replay")]) == 0
    # a refusal says the seq was not applied: it audits nothing
    assert unaudited(samples, [act(1, 1.0), act(2, 9.0, "refused")]) == 1
    assert unaudited(samples, [act(1, 1.0), act(3, 2.0)]) == 1


def test_convergence_needs_every_workload_in_band_for_the_whole_stretch() -> None:
    b = "demo/Deployment/b"
    samples = [
        SpecSample(float(t), w, 5 if t >= 4 else 1, None) for t in range(30) for w in (WL, b)
    ]
    assert convergence(samples, flat(5), [WL, b], heal=2.0) == 2.0
    # within the tolerance counts as converged
    assert convergence(samples, flat(6), [WL, b], heal=2.0) == 2.0
    # one workload out of band for a second restarts the stretch
    bumped = [s if (s.at, s.workload) != (8.0, b) else SpecSample(8.0, b, 9, None) for s in samples]
    assert convergence(bumped, flat(5), [WL, b], heal=2.0) == 7.0
    # never in band, or not for long enough
    assert convergence(samples, flat(9), [WL, b], heal=2.0) is None
    assert convergence(samples[:20], flat(5), [WL, b], heal=2.0) is None
    # a workload never sampled: not converged
    assert convergence(samples, flat(5), [WL, b, "demo/Deployment/c"], heal=2.0) is None


@given(st.integers(1, 20), st.floats(0, 50), st.integers(0, 5))
def test_following_the_reference_exactly_converges_at_the_heal(
    n: int, heal: float, lag: int
) -> None:
    samples = [SpecSample(heal + lag + t * 0.5, WL, n, None) for t in range(30)]
    got = convergence(samples, flat(n), [WL], heal=heal)
    assert got is not None and abs(got - lag) < 1e-6


def test_the_report_line_has_the_issue_format() -> None:
    v = Verdict("sigkill-decider-0", 12.34, True, 0, 0, 0, 0, 0)
    assert v.line() == "fault=sigkill-decider-0 converge_s=12.3 lost=0 duplicates=0 regressions=0"
    assert v.ok
    assert not Verdict("x", 60.0, False, 0, 0, 0, 0, 0).ok
    assert not Verdict("x", 1.0, True, 0, 0, 0, 0, 1).ok
