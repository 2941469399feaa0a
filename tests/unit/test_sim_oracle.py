"""The perfect-foresight oracle: zero violations, and no plan with fewer replica-hours has them."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from governor.events import Reason
from governor.policy.types import ScaleInputs, ScaleResult, ScaleState
from governor.spec import ScalingPolicySpec
from governor_tools.sim import traces
from governor_tools.sim.oracle import gap_closed, need, peak_need, run_oracle
from governor_tools.sim.policies import default_policy, hpa_policy
from governor_tools.sim.replay import SimConfig, Summary, replay
from governor_tools.sim.runs import policy_evaluate, run_all, run_hpa

loads = st.lists(st.floats(min_value=0, max_value=500, allow_nan=False), min_size=2, max_size=40)


def _trace(values: list[float], step: float) -> traces.Trace:
    return traces.from_rows("t", [1_700_000_000 + step * i for i in range(len(values))], values)


def test_need_is_the_fewest_replicas_that_serve() -> None:
    assert need(0.0, 10) == 1
    assert need(10.0, 10) == 1
    assert need(10.5, 10) == 2
    assert need(0.3, 0.1) == 3  # 3 × 0.1 ≥ 0.3 though 0.3 / 0.1 > 3 in floats


@settings(max_examples=60, deadline=None)
@given(
    values=loads,
    step=st.sampled_from([7.0, 10.0, 60.0, 300.0]),
    startup=st.sampled_from([0.0, 30.0, 60.0]),
)
def test_the_oracle_never_violates_and_beats_hpa(
    values: list[float], step: float, startup: float
) -> None:
    trace = _trace(values, step)
    config = SimConfig(capacity_per_replica=10.0, startup_seconds=startup)
    oracle = run_oracle(trace, config)
    assert oracle.summary.violation_seconds == 0
    hpa = run_hpa(trace, config, policy_evaluate()).summary
    if hpa.violation_seconds == 0:
        # HPA serves at 70 % of C: a plan at C with foresight never needs more.
        assert oracle.summary.replica_hours <= hpa.replica_hours + 1e-9


def _replay_plan(trace: traces.Trace, config: SimConfig, plan: dict[float, int]) -> Summary:
    """A fixed plan (decision time -> replicas) through the same loop and scoring."""

    def fixed(
        policy: ScalingPolicySpec,
        inputs: ScaleInputs,
        state: ScaleState,
        now: float,
        *,
        step_seconds: float,
    ) -> tuple[ScaleResult, ScaleState]:
        assert inputs.workload is not None
        current = inputs.workload.spec_replicas
        return ScaleResult(plan[now], current, "metric", [Reason(rule="metric")], [], now), state

    first = min(plan)
    initial = peak_need(trace, trace.start, first + config.startup_seconds, 10.0)
    run = replay("plan", trace, hpa_policy(config), config, evaluate=fixed, initial=initial)
    return run.summary


@settings(max_examples=40, deadline=None)
@given(values=loads, pick=st.integers(min_value=0))
def test_one_replica_fewer_at_any_decision_violates(values: list[float], pick: int) -> None:
    """Each decision's count is a lower bound: lowering any one of them breaks zero violations."""
    trace = _trace(values, 60.0)
    config = SimConfig(capacity_per_replica=10.0, startup_seconds=60.0)
    rows = run_oracle(trace, config).rows
    plan = {r.timestamp: r.replicas_requested for r in rows}
    assert _replay_plan(trace, config, plan).violation_seconds == 0
    i = pick % len(rows)
    if rows[i].replicas_requested <= 1:
        return
    plan[rows[i].timestamp] -= 1
    assert _replay_plan(trace, config, plan).violation_seconds > 0


def test_gap_closed_measures_against_hpa_and_the_oracle() -> None:
    assert gap_closed(90.0, 100.0, 80.0) == 0.5
    assert gap_closed(100.0, 100.0, 80.0) == 0.0
    assert gap_closed(110.0, 100.0, 80.0) == -0.5
    assert gap_closed(90.0, 80.0, 80.0) is None


def test_run_all_prints_the_gap_closed_for_policies_only() -> None:
    trace = _trace([10, 10, 200, 200, 30, 30, 30, 30, 30, 30], 60.0)
    config = SimConfig(capacity_per_replica=10.0)
    runs = {
        r.name: r.summary
        for r in run_all(trace, config, {"g": default_policy(config).spec}, with_hpa=True)
    }
    assert set(runs) == {"g", "hpa", "oracle"}
    assert runs["oracle"].violation_seconds == 0
    assert runs["oracle"].replica_hours < runs["hpa"].replica_hours
    assert runs["g"].oracle_gap_closed is not None
    assert runs["hpa"].oracle_gap_closed is None and runs["oracle"].oracle_gap_closed is None
