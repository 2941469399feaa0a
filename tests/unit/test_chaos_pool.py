"""The chaos run's pool reference (tests/chaos/pool.py): stage 2's allocation of every
workload's fault-free demand, with the fault's nodes out, on hand-built tables."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from governor import events
from governor.spec import policy_from_obj
from governor_tools.demo import scenario as sc
from tests.chaos.checks import Reference, scale_downs_on_missing_data
from tests.chaos.load import web_policy, web_services
from tests.chaos.pool import PoolInputs, pool_reference

TS = sc.TimeScale(10.0)
WEB = web_services()
JOB = sc.TRAINING.workload
NODES = sc.node_names()


def inputs(cpu_per_node: float = 32.0) -> PoolInputs:
    """The chaos pool on cpu alone: 4 nodes of 32 cpu, 20 web services of 0.5 cpu per pod and
    the job's 8 cpu per worker (its devices left out: the GPUs never bind here)."""
    policies = [policy_from_obj(web_policy(s, TS)) for s in WEB]
    policies.append(policy_from_obj(sc.training_policy(sc.TRAINING, TS)))
    states = {
        p.workload: events.WorkloadState(
            workload=p.workload,
            spec_replicas=2,
            ready_replicas=2,
            requests={"cpu": 8.0 if p.workload == JOB else 0.5},
            observed_at=0.0,
        )
        for p in policies
    }
    nodes = tuple(
        events.NodeState(node=n, pool=sc.POOL, allocatable={"cpu": cpu_per_node}) for n in NODES
    )
    return PoolInputs({p.workload: p for p in policies}, states, nodes)


def base(web: int) -> Reference:
    def ref(workload: str, wall: float) -> int:
        return sc.TRAINING.max_replicas if workload == JOB else web

    return ref


WORKLOADS = [s.workload for s in WEB] + [JOB]


@settings(max_examples=20, deadline=None)
@given(st.integers(min_value=1, max_value=6))
def test_while_the_pool_holds_every_demand_the_pool_reference_is_the_base(web: int) -> None:
    # 20 x 6 x 0.5 + 8 x 8 = 124 cpu of 128: everything fits, nothing is cut.
    ref = pool_reference(base(web), inputs(), WORKLOADS, (), (0.0, 5.0, 10.0), 0.5)
    for t in (0.0, 3.0, 9.5):
        assert all(ref(w, t) == base(web)(w, t) for w in WORKLOADS)


def test_a_node_out_cuts_the_lower_tier_job_while_it_lasts_and_judges_the_cut() -> None:
    web = 6  # 60 cpu of the 96 three nodes leave: 36 for the job, 4 workers of 8 cpu
    ref = pool_reference(base(web), inputs(), WORKLOADS, (NODES[-1],), (0.0, 20.0, 40.0), 0.5)
    assert ref(JOB, 10.0) == 4 and ref(JOB, 30.0) == sc.TRAINING.max_replicas
    assert all(ref(s.workload, 10.0) == web for s in WEB)
    assert ref(JOB, 100.0) == sc.TRAINING.max_replicas  # past the window: the base

    def cut(to: int) -> events.ScaleDecision:
        return events.ScaleDecision(
            decision_id="d", workload=JOB, seq=1, from_replicas=8, to_replicas=to,
            reasons=[events.Reason(rule="priority")], inputs=[], policy_generation=1,
            newest_input=9.0, decided_at=10.0,
        )  # fmt: skip

    # Judged against the pool's reference (nothing exempt): the right cut passes, a deeper
    # one is a scale-down the load and the pool never called for.
    assert scale_downs_on_missing_data([cut(4)], 0.0, 25.0, ref, exempt=()) == 0
    assert scale_downs_on_missing_data([cut(2)], 0.0, 25.0, ref, exempt=()) == 1
    # against the base reference the same deep cut was exempt (POOL_CUTS): it went unseen
    assert scale_downs_on_missing_data([cut(2)], 0.0, 25.0, base(web)) == 0
