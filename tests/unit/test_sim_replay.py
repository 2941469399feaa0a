"""Traces, the replica model and the replay loop's bookkeeping."""

from __future__ import annotations

import io
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from governor_tools.sim import replicas as rm
from governor_tools.sim import traces
from governor_tools.sim.policies import default_policy, hpa_policy
from governor_tools.sim.replay import SimConfig, SimError, replay
from governor_tools.sim.runs import policy_evaluate, run_hpa


def test_csv_trace_holds_each_value_until_the_next_row() -> None:
    t = traces.parse_csv(io.StringIO("timestamp,value\n100,1\n110,2\n130,3\n"), name="x")
    assert t.step == 15  # median of 10 and 20
    assert t.end == 145
    got = list(traces.seconds(t))
    assert len(got) == 45
    assert got[0] == (100, 1)
    assert got[9] == (109, 1)
    assert got[10] == (110, 2)
    assert got[29] == (129, 2)
    assert got[-1] == (144, 3)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("a,b\n1,2\n", "timestamp,value"),
        ("timestamp,value\n", "no rows"),
        ("timestamp,value\n1,x\n", "two numbers"),
        ("timestamp,value\n2,1\n1,1\n", "increase"),
        ("timestamp,value\n1,-1\n", ">= 0"),
    ],
)
def test_csv_errors_say_what_to_fix(text: str, problem: str) -> None:
    with pytest.raises(traces.TraceError, match=problem):
        traces.parse_csv(io.StringIO(text), name="x")


def test_builtins_are_the_real_files_with_synthesized_timestamps() -> None:
    for b in traces.BUILTINS:
        assert "synthetic" not in b.folder + b.file
        t = traces.load(traces.BUILTIN_PREFIX + b.name)
        assert t.step == b.step
        assert t.timestamps[:3] == [0.0, b.step, 2 * b.step]
        assert len(t.values) > 1000
        assert min(t.values) >= 0
    with pytest.raises(traces.TraceError, match="known"):
        traces.load("builtin:nope")


def test_held_out_series_are_real_and_none_is_a_builtin() -> None:
    # Held out means no default was tuned on it: never a built-in's (file, column) pair.
    tuned = {(b.folder, b.file, b.column) for b in traces.BUILTINS}
    names = [b.name for b in traces.HELD_OUT]
    assert len(set(names)) == len(names)
    assert not set(names) & {b.name for b in traces.BUILTINS}
    for b in traces.HELD_OUT:
        assert "synthetic" not in b.folder + b.file
        assert (b.folder, b.file, b.column) not in tuned
        t = traces.load(traces.HELD_OUT_PREFIX + b.name)
        assert t.name == traces.HELD_OUT_PREFIX + b.name
        assert t.timestamps[:2] == [0.0, b.step]
        assert len(t.values) > 1000
        assert min(t.values) >= 0 and max(t.values) > min(t.values)
    with pytest.raises(traces.TraceError, match="known: held-out:"):
        traces.load("held-out:nope")


def test_replicas_start_late_and_stop_at_once() -> None:
    r = rm.serving(2, since=0)
    r = rm.scale(r, 5, now=100, startup_seconds=60)
    assert (r.requested, r.ready(159), r.ready(160)) == (5, 2, 5)
    r = rm.scale(r, 3, now=120, startup_seconds=60)  # the youngest (still starting) go first
    assert (r.requested, r.ready(120), r.ready(160)) == (3, 2, 3)
    r = rm.scale(r, 1, now=200, startup_seconds=60)
    assert (r.requested, r.ready(200)) == (1, 1)


@settings(max_examples=100, deadline=None)
@given(
    steps=st.lists(st.tuples(st.integers(0, 20), st.integers(1, 30)), min_size=1, max_size=20),
    startup=st.integers(0, 120),
)
def test_replica_model_invariants(steps: list[tuple[int, int]], startup: int) -> None:
    r = rm.serving(1, since=0)
    now = 0
    for desired, gap in steps:
        now += gap
        r = rm.scale(r, desired, now, startup)
        assert r.requested == desired
        assert 0 <= r.ready(now) <= r.requested
        assert r.ready(now + startup) == r.requested  # everything asked for serves after startup
        assert list(r.ready_at) == sorted(r.ready_at)


CONFIG = SimConfig(capacity_per_replica=10, startup_seconds=60, target_utilization=0.5)


def _trace(rows: list[tuple[float, float]], step: float) -> traces.Trace:
    return traces.from_rows("t", [t for t, _ in rows], [v for _, v in rows], step=step)


def test_scores_are_computed_per_second() -> None:
    # Constant load 10 served by 2 replicas of 10 at 0.5 target: never violated.
    flat = _trace([(0, 10), (600, 10)], step=600)
    run = replay("g", flat, hpa_policy(CONFIG), CONFIG, evaluate=policy_evaluate())
    assert run.summary.violation_seconds == 0
    assert run.summary.unserved_fraction == 0
    assert run.summary.scale_events == 0
    # 79 decisions (15 .. 1185) of 2 replicas for 15 s each.
    assert run.summary.replica_hours == pytest.approx(79 * 2 * 15 / 3600)


def test_governor_default_reacts_before_the_hpa_on_a_step() -> None:
    # 10 -> 100 at 300 s: both need ceil(100/5) = 20 replicas; HPA sees it 15-30 s later.
    step = _trace([(0, 10), (300, 100), (600, 100), (900, 100)], step=300)
    gov = replay("g", step, default_policy(CONFIG).spec, CONFIG, evaluate=policy_evaluate())
    hpa = run_hpa(step, CONFIG, policy_evaluate())
    first_up = {
        name: min(r.timestamp for r in run.rows if r.replicas_requested > 2)
        for name, run in (("g", gov), ("h", hpa))
    }
    assert first_up == {"g": 315, "h": 330}
    assert gov.summary.violation_seconds < hpa.summary.violation_seconds


def test_initial_replicas_follow_the_target_and_bounds() -> None:
    t = _trace([(0, 42), (60, 42)], step=60)
    run = run_hpa(t, CONFIG, policy_evaluate())
    assert run.rows[0].replicas_ready == math.ceil(42 / 5)


def test_config_is_validated() -> None:
    with pytest.raises(SimError, match="capacity"):
        SimConfig(capacity_per_replica=0)
    with pytest.raises(SimError, match="utilization"):
        SimConfig(capacity_per_replica=1, target_utilization=1.5)
