"""Stage 2 in stage 1 for pools without inventory (pass-through), and the switch of a workload's
stage 2 between the two stages when its pool gains or loses nodes (`cores.decider_handover`)."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from governor.cores.decider import DECISION_PREFIX
from governor.cores.decider_handover import merged_checkpoint, passes_through
from governor.cores.decider_memory import Outputs, restoring_stages
from governor.events import DeciderCheckpoint, NodeState, ScaleDecision
from governor.ownership import Ownership
from tests.unit.test_cores_decider_split import WL, Split, new, policy, state, windows

NODE = NodeState(node="n1", pool="default", allocatable={"cpu": 512.0})


def test_a_pool_without_inventory_is_decided_in_stage1_and_stage2_drops_its_recommendation() -> (
    None
):
    split = Split(pass_through=True)
    split.on_workload(state(2, 999.0))
    for w in windows(1000.0, 1400.0):
        split.stage1.on_window(w)
    out = split.stage1.decide(WL, 1000.0)
    assert out.decision is not None and out.decision.seq == 1
    assert out.checkpoint is not None and out.checkpoint.workload == WL  # acknowledged first
    assert out.checkpoint.seq == 1
    assert out.recommendation is not None and out.recommendation.decided
    split.stage2.on_recommendation(out.recommendation)
    assert not split.stage2.recommendations
    assert split.stage2.decide(WL, 1000.0).decision is None


def test_passes_through_only_without_inventory_and_not_elastic() -> None:
    spec = policy().spec
    assert passes_through(spec, frozenset())
    assert not passes_through(spec, frozenset({spec.pool}))
    assert passes_through(spec, frozenset({"gpu"}))


def test_a_gained_node_hands_the_workload_to_stage2_above_its_seq() -> None:
    split = Split(pass_through=True)
    split.on_workload(state(2, 999.0))
    d1 = split.step(1000.0, 1400.0)
    assert d1 is not None and d1.seq == 1
    split.on_workload(state(d1.to_replicas, 1001.0))
    for core in (split.stage1, split.stage2):
        core.on_node(NODE)
    for w in windows(1020.0, 3000.0):
        split.stage1.on_window(w)
    out = split.stage1.decide(WL, 1020.0)
    rec = out.recommendation
    assert out.decision is None and rec is not None and not rec.decided
    assert (rec.last_seq, rec.last_to) == (1, d1.to_replicas)
    split.stage2.on_recommendation(rec)
    (d2,) = split.stage2.decide_pool("default", 1020.0).decisions
    assert d2.seq == 2 and d2.to_replicas > d1.to_replicas
    # The pool loses its node again: the workload stays with stage 2 until an assignment.
    for core in (split.stage1, split.stage2):
        core.on_node_deleted("n1")
    for w in windows(1040.0, 300.0):
        split.stage1.on_window(w)
    again = split.stage1.decide(WL, 1040.0)
    assert again.decision is None and again.recommendation is not None
    assert not again.recommendation.decided


def test_after_an_assignment_stage1_continues_stage2s_seq() -> None:
    core = new("stage1")
    core.on_workload(state(2, 999.0))
    core.on_checkpoint(DeciderCheckpoint(workload=WL, seq=3, updated_at=1.0))
    core.on_checkpoint(DeciderCheckpoint(workload=DECISION_PREFIX + WL, seq=9, last_to=2))
    for w in windows(1000.0, 1400.0):
        core.on_window(w)
    d = core.decide(WL, 1000.0).decision
    assert d is not None and d.seq == 10


seqs = st.integers(min_value=0, max_value=50)
times = st.floats(min_value=0.0, max_value=1e6)


@given(seqs, seqs, times, times, st.binary(max_size=8))
def test_merged_checkpoint_keeps_the_newer_decision_and_stage1s_policy_state(
    s1: int, s2: int, n1: float, n2: float, state_bytes: bytes
) -> None:
    one = DeciderCheckpoint(workload=WL, seq=s1, last_to=1, last_newest_input=n1,
                            scale_state=state_bytes)  # fmt: skip
    two = DeciderCheckpoint(workload=DECISION_PREFIX + WL, seq=s2, last_to=2, last_newest_input=n2)
    got = merged_checkpoint(one, two)
    assert got is not None and got.workload == WL and got.scale_state == state_bytes
    assert got.seq == max(s1, s2) and got.last_newest_input == max(n1, n2)
    assert got.last_to == (2 if s2 > s1 else 1)
    alone = merged_checkpoint(None, two)
    assert alone is not None and alone.workload == WL and alone.seq == s2
    assert merged_checkpoint(one, None) is one


class Pipeline(Split):
    """Both cores, the decider-state table (compacted: the last write per key) and a target
    that takes every decision up at once."""

    def __init__(self) -> None:
        super().__init__(pass_through=True)
        self.table: dict[str, DeciderCheckpoint] = {}
        self.made: list[ScaleDecision] = []
        self.replicas = 2
        self.t = 1000.0

    def write(self, out: Outputs) -> None:
        for cp in [out.checkpoint, *out.checkpoints]:
            if cp is not None:
                self.table[cp.workload] = cp
        for d in [out.decision, *out.decisions]:
            if d is not None:
                self.made.append(d)
                self.replicas = d.to_replicas

    def load(self, mean: float) -> None:
        self.t += 5.0
        self.on_workload(state(self.replicas, self.t - 1))
        for w in windows(self.t, mean):
            self.stage1.on_window(w)
        first = self.stage1.decide(WL, self.t)
        self.write(first)
        rec = first.recommendation
        if rec is None:
            return
        self.stage2.on_recommendation(rec)
        if self.stage2.has_inventory("default"):
            self.write(self.stage2.decide_pool("default", self.t))
        else:
            self.write(self.stage2.decide(WL, self.t))

    def assign(self) -> None:
        """A rebalance: stage 1 flushes, both forget, both read the table back."""
        for cp in self.stage1.checkpoints_due(self.t):
            self.table[cp.workload] = cp
        cores = (self.stage1, self.stage2)
        for core in cores:
            core.assign(Ownership.all(), self.t - 10.0)  # settled by the next evaluation
        for cp in self.table.values():
            for i in restoring_stages(cp):
                cores[i].on_checkpoint(cp)


steps = st.lists(
    st.one_of(
        st.floats(min_value=0.0, max_value=3000.0),
        st.sampled_from(["node+", "node-", "assign", "node+ stage1 only", "node+ stage2 only"]),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=80, deadline=None)
@given(steps)
def test_seq_only_grows_and_no_input_is_decided_twice_across_any_switch(
    script: list[float | str],
) -> None:
    """Whatever the pool's nodes do (seen by both stages, or by one before the other) and
    wherever the group rebalances, the decisions of both stages together: seq strictly grows
    and one input never leads to two different targets."""
    p = Pipeline()
    for step in script:
        if isinstance(step, float):
            p.load(step)
        elif step == "assign":
            p.assign()
        elif step == "node-":
            for core in (p.stage1, p.stage2):
                core.on_node_deleted("n1")
        else:
            only = step.removeprefix("node+").strip()
            for name, core in (("stage1 only", p.stage1), ("stage2 only", p.stage2)):
                if not only or only == name:
                    core.on_node(NODE)
    got = [d.seq for d in p.made]
    assert got == sorted(set(got)), got
    by_input: dict[float, set[int]] = defaultdict(set)
    for d in p.made:
        by_input[d.newest_input].add(d.to_replicas)
    assert all(len(v) == 1 for v in by_input.values()), by_input
