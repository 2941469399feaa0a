"""The perfect-foresight oracle: the least replica-hours with zero violation seconds.

It knows the whole trace and the replica model's true start-up S. Under the replica model
(replicas.py: a replica requested at d serves from d + S, a removed one stops at once, the
youngest go first) the replicas serving at t are the fewest requested at any decision in
[d*(t), t], where d*(t) is the last decision at or before t − S. So zero violations at t asks
every decision d with d ≤ t < d + step + S to request at least need(t) = the fewest replicas
with replicas × C ≥ load(t), and requesting exactly

    plan(d) = max need(t) over t in [d, d + step + S)

meets every such bound at once. No plan with fewer replica-hours has zero violations: each
decision's count is a lower bound of every zero-violation plan. The run starts with the
replicas the first S seconds and the first step need, all serving (the others start warm too).

The plan is replayed through the same loop and scoring as every policy (replay.py), so its zero
violations are checked, not assumed.
"""

from __future__ import annotations

import bisect
import math

from governor.events import Reason
from governor.policy.types import ScaleInputs, ScaleResult, ScaleState
from governor.spec import ScalingPolicySpec
from governor_tools.sim.policies import hpa_policy
from governor_tools.sim.replay import Run, SimConfig, replay
from governor_tools.sim.traces import Trace

ORACLE = "oracle"


def need(load: float, capacity: float) -> int:
    """The fewest replicas that serve `load` (n × C ≥ load), at least 1."""
    n = max(1, math.ceil(load / capacity))
    return n - 1 if n > 1 and (n - 1) * capacity >= load else n


def peak_need(trace: Trace, start: float, end: float, capacity: float) -> int:
    """need() of the highest load the trace offers anywhere in [start, end)."""
    ts, vs = trace.timestamps, trace.values
    end = min(end, trace.end)
    i = max(0, bisect.bisect_right(ts, start) - 1)
    top = vs[i]
    i += 1
    while i < len(ts) and ts[i] < end:
        top = max(top, vs[i])
        i += 1
    return need(top, capacity)


def gap_closed(policy_hours: float, hpa_hours: float, oracle_hours: float) -> float | None:
    """The share of HPA's replica-hour gap to the oracle a policy closes (1: at the oracle,
    0: no better than HPA, < 0: more than HPA). None when HPA is at the oracle already."""
    gap = hpa_hours - oracle_hours
    if gap <= 1e-9:
        return None
    return (hpa_hours - policy_hours) / gap


def run_oracle(trace: Trace, config: SimConfig, step_seconds: float | None = None) -> Run:
    step = step_seconds or config.step_seconds
    c, horizon = config.capacity_per_replica, step + config.startup_seconds

    def plan(
        policy: ScalingPolicySpec,
        inputs: ScaleInputs,
        state: ScaleState,
        now: float,
        *,
        step_seconds: float,
    ) -> tuple[ScaleResult, ScaleState]:
        desired = peak_need(trace, now, now + horizon, c)
        current = inputs.workload.spec_replicas if inputs.workload is not None else 0
        reason = Reason(rule="metric", detail=f"oracle: peak need over next {horizon:g} s")
        result = ScaleResult(
            desired=desired,
            current=current,
            bound_by="metric",
            reasons=[reason],
            inputs=[],
            newest_input=now,
        )
        return result, state

    first = (math.floor(trace.start / step) + 1) * step
    initial = peak_need(trace, trace.start, first + config.startup_seconds, c)
    return replay(
        ORACLE,
        trace,
        hpa_policy(config),
        config,
        evaluate=plan,
        step_seconds=step,
        initial=initial,
    )
