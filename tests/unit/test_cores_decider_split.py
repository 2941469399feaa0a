"""The decider split across instances: stage 1 and stage 2 in separate cores, ownership by
partition, checkpoints that follow the partitions (issue 19, item 3)."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiokafka.partitioner import DefaultPartitioner
from hypothesis import given, settings
from hypothesis import strategies as st

from governor.cores.decider import DECISION_PREFIX, DeciderCore
from governor.cores.decider_memory import Memory, memory_of
from governor.events import (
    DeciderCheckpoint,
    LoadWindow,
    NodeState,
    ScaleDecision,
    WorkloadState,
)
from governor.ownership import Ownership, partition_of
from governor.spec import ScalingPolicy, policies_from_yaml

EXAMPLE = Path(__file__).parents[2] / "examples" / "web-policy.yaml"
WL = "shop/Deployment/web"


def policy() -> ScalingPolicy:
    (p,) = policies_from_yaml(EXAMPLE.read_text())
    return p


def windows(t: float, mean: float) -> list[LoadWindow]:
    return [
        LoadWindow(
            workload=WL,
            metric="rps",
            window=kind,
            start=t - size,
            end=t,
            count=10,
            mean=mean,
            max=mean,
            p95=mean,
            newest_sample=t - 0.5,
            closed=False,
        )
        for kind, size in (("stable", 60.0), ("panic", 6.0))
    ]


def state(replicas: int, at: float) -> WorkloadState:
    return WorkloadState(
        workload=WL, spec_replicas=replicas, ready_replicas=replicas, observed_at=at
    )


def new(role: str) -> DeciderCore:
    core = DeciderCore(role=role)  # type: ignore[arg-type]
    core.assign(Ownership.all())
    core.on_policy("shop/web", policy())
    return core


class Split:
    """Two split cores wired as the service wires them (the topic in between is a call). By
    default stage 1 hands every workload to stage 2 (`pass_through=False`: the path of a pool
    with inventory, or of a workload handed over); with pass-through it decides a workload of a
    pool without inventory itself."""

    def __init__(self, pass_through: bool = False) -> None:
        self.stage1, self.stage2 = new("stage1"), new("stage2")
        self.stage1.pass_through = pass_through
        self.checkpoints: list[DeciderCheckpoint] = []  # what was written before deciding

    def on_workload(self, s: WorkloadState) -> None:
        for core in (self.stage1, self.stage2):
            core.on_workload(s)

    def step(self, t: float, mean: float) -> ScaleDecision | None:
        for w in windows(t, mean):
            self.stage1.on_window(w)
        first = self.stage1.decide(WL, t)
        if first.decision is not None:  # passed through
            assert first.checkpoint is not None
            self.checkpoints.append(first.checkpoint)
            return first.decision
        rec = first.recommendation
        if rec is None:
            return None
        self.stage2.on_recommendation(rec)
        out = self.stage2.decide(WL, t)
        if out.checkpoint is not None:
            self.checkpoints.append(out.checkpoint)
        return out.decision


loads = st.lists(st.floats(min_value=0.0, max_value=3000.0), min_size=1, max_size=40)


@settings(max_examples=40, deadline=None)
@given(loads, st.booleans())
def test_split_cores_decide_as_one_core_when_the_target_follows(
    means: list[float], pass_through: bool
) -> None:
    """With the target taking up each request at once (the actuator's normal case), the split
    cores make the one-instance core's decisions: same seq, replicas, reasons and inputs; with
    stage 2 in stage 1 (pass-through) or after the recommendations topic."""
    one, split = new("both"), Split(pass_through)
    replicas = 2
    for i, mean in enumerate(means):
        t = 1000.0 + 5 * i
        s = state(replicas, t - 1)
        one.on_workload(s)
        split.on_workload(s)
        for w in windows(t, mean):
            one.on_window(w)
        want = one.decide(WL, t).decision
        got = split.step(t, mean)
        assert got == want
        if want is not None:
            replicas = want.to_replicas


def test_stage1_never_decides_and_stage2_never_evaluates_windows() -> None:
    split = Split()
    split.on_workload(state(2, 999.0))
    for w in windows(1000.0, 2000.0):
        split.stage1.on_window(w)
    out = split.stage1.decide(WL, 1000.0)
    assert out.recommendation is not None and out.decision is None and out.checkpoint is None
    assert split.stage1.dirty == {WL: None}
    assert not split.stage2.windows and split.stage2.decide(WL, 1000.0).decision is None


@settings(max_examples=30, deadline=None)
@given(loads, st.integers(min_value=0, max_value=39))
def test_a_handover_continues_stage1_from_its_checkpoint(means: list[float], cut: int) -> None:
    """Stage 1's checkpoints (flushed before the offsets are committed) carry everything its
    recommendations depend on: a new owner restored from them recommends what the old one
    would have."""
    old = new("stage1")
    old.republish_seconds = 0.0  # every evaluation's recommendation, to compare them all
    old.on_workload(state(2, 0.0))
    cut = min(cut, len(means) - 1)
    table: dict[str, DeciderCheckpoint] = {}  # the compacted topic: the newest per key
    for i, mean in enumerate(means[:cut]):
        for w in windows(1000.0 + 5 * i, mean):
            old.on_window(w)
        cp = old.decide(WL, 1000.0 + 5 * i).checkpoint  # a pass-through decision's
        if cp is not None:
            table[cp.workload] = cp
    table.update((cp.workload, cp) for cp in old.checkpoints_due(2000.0))
    heir = DeciderCore(role="stage1", republish_seconds=0.0)
    heir.on_policy("shop/web", policy())
    heir.on_workload(state(2, 0.0))
    heir.assign(Ownership.all())
    for cp in table.values():
        heir.on_checkpoint(cp)
    for i, mean in enumerate(means[cut:], start=cut):
        t = 1000.0 + 5 * i
        for core in (old, heir):
            for w in windows(t, mean):
                core.on_window(w)
        assert heir.decide(WL, t).recommendation == old.decide(WL, t).recommendation


def kept(mem: Memory) -> tuple[object, ...]:
    """Every field of a workload's memory a checkpoint carries."""
    return (mem.state, mem.seq, mem.last_to, mem.last_decided_at, mem.last_newest_input,
            mem.elastic)  # fmt: skip


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.floats(min_value=0.0, max_value=3000.0), st.booleans()), max_size=60),
    st.integers(min_value=0, max_value=59),
    st.booleans(),
)
def test_a_handover_from_the_checkpoint_table_continues_stage1_though_flushes_skip(
    steps: list[tuple[float, bool]], cut: int, pass_through: bool
) -> None:
    """Flushes leave out a workload whose last checkpoint holds the same memory: whenever the
    offsets are committed (after a flush), the newest checkpoint per key in the compacted topic
    still restores an heir that recommends and decides exactly as the old owner."""
    old = new("stage1")
    old.republish_seconds, old.pass_through = 0.0, pass_through
    replicas = 2
    table: dict[str, DeciderCheckpoint] = {}  # the compacted topic: the newest per key
    cut = min(cut, len(steps))
    t = 1000.0
    for mean, flush in steps[:cut]:
        t += 1.0  # a second apart: several evaluations share a 15 s history step
        old.on_workload(state(replicas, t - 0.5))
        for w in windows(t, mean):
            old.on_window(w)
        out = old.decide(WL, t)
        if out.checkpoint is not None:  # a pass-through decision's, written before it
            table[out.checkpoint.workload] = out.checkpoint
        replicas = out.decision.to_replicas if out.decision is not None else replicas
        if flush:  # then the offsets are committed: the table must restore the memory as is
            table.update((cp.workload, cp) for cp in old.checkpoints_due(t))
            assert kept(memory_of(table[WL])) == kept(old.memory[WL])
    table.update((cp.workload, cp) for cp in old.checkpoints_due(t))  # the revocation's flush
    heir = DeciderCore(role="stage1", republish_seconds=0.0, pass_through=pass_through)
    heir.on_policy("shop/web", policy())
    heir.assign(Ownership.all())
    for cp in table.values():
        heir.on_checkpoint(cp)
    for mean, _ in steps[cut:]:
        t += 1.0
        for core in (old, heir):
            core.on_workload(state(replicas, t - 0.5))
            for w in windows(t, mean):
                core.on_window(w)
        want, got = old.decide(WL, t), heir.decide(WL, t)
        assert (got.recommendation, got.decision) == (want.recommendation, want.decision)
        replicas = want.decision.to_replicas if want.decision is not None else replicas


@pytest.mark.parametrize("pass_through", [False, True])
def test_a_flush_writes_no_checkpoint_that_holds_what_the_last_one_held(pass_through: bool) -> None:
    core = new("stage1")
    core.pass_through = pass_through
    core.on_workload(state(2, 999.0))
    for t in (1000.0, 1001.0):
        for w in windows(t, 140.0):  # 140 rps at 70 per pod: 2 replicas, as it runs
            core.on_window(w)
        core.decide(WL, t)
    assert [cp.workload for cp in core.checkpoints_due(1001.0)] == [WL]
    for w in windows(1002.0, 140.0):
        core.on_window(w)
    core.decide(WL, 1002.0)  # the same step of the history, the same count: nothing new
    assert core.dirty == {WL: None} and core.checkpoints_due(1002.0) == []
    for w in windows(1003.0, 1400.0):
        core.on_window(w)
    up = core.decide(WL, 1003.0)  # new history, rate-limit events (and seq, passed through)
    if pass_through:  # its decision's checkpoint, written before it, holds all of it
        assert up.decision is not None and up.checkpoint is not None
        assert core.checkpoints_due(1003.0) == []
    else:
        assert [cp.workload for cp in core.checkpoints_due(1003.0)] == [WL]


def test_a_handover_of_stage2_keeps_seq_growing_and_decides_no_window_twice() -> None:
    split = Split()
    split.on_workload(state(2, 999.0))
    d1 = split.step(1000.0, 1400.0)  # 1400 rps / 70 per pod -> up
    assert d1 is not None and d1.seq == 1
    # What the service wrote before publishing d1: stage 2's checkpoint of the workload.
    rec = split.stage2.recommendations["default"][WL]
    heir = new("stage2")
    heir.on_workload(state(2, 999.0))  # the target has not taken d1 up yet
    (cp,) = split.checkpoints
    assert cp.workload == DECISION_PREFIX + WL and cp.seq == 1
    heir.on_checkpoint(cp)
    # The new owner re-reads the recommendation after the last commit: d1 again is in flight,
    # so it is not decided a second time.
    heir.on_recommendation(rec)
    assert heir.decide(WL, 1001.0).decision is None
    # New input: the next decision continues the seq.
    split.stage1.on_workload(state(d1.to_replicas, 1002.0))
    heir.on_workload(state(d1.to_replicas, 1002.0))
    for w in windows(1020.0, 3000.0):  # past the scale-up rate limit's 15 s period
        split.stage1.on_window(w)
    rec2 = split.stage1.decide(WL, 1020.0).recommendation
    assert rec2 is not None
    heir.on_recommendation(rec2)
    d2 = heir.decide(WL, 1020.0).decision
    assert d2 is not None and d2.seq == 2 and d2.to_replicas > d1.to_replicas


def test_a_one_instance_checkpoint_seeds_stage2_seq() -> None:
    """Upgrading from one decider: its checkpoint (key: workload, seq 7) is stage 2's start."""
    core = new("stage2")
    core.on_checkpoint(DeciderCheckpoint(workload=WL, seq=7, last_to=2, updated_at=1.0))
    core.on_checkpoint(DeciderCheckpoint(workload=DECISION_PREFIX + WL, seq=3))
    split = Split()
    split.stage2 = core
    split.on_workload(state(2, 999.0))
    d = split.step(1000.0, 1400.0)
    assert d is not None and d.seq == 8


def test_assign_forgets_memory_but_keeps_the_tables() -> None:
    split = Split()
    split.on_workload(state(2, 999.0))
    assert split.step(1000.0, 1400.0) is not None
    for core in (split.stage1, split.stage2):
        core.assign(Ownership())
        assert not core.memory and not core.windows and not core.recommendations
        assert WL in core.policies and WL in core.workloads
        assert not core.ownership.owns_workload(WL) and not core.ownership.owns_pool("default")


@given(st.text(min_size=1, max_size=40), st.integers(min_value=1, max_value=64))
def test_partition_of_is_the_producers_partition(key: str, n: int) -> None:
    assert partition_of(key, n) == DefaultPartitioner()(key.encode(), list(range(n)), [])


@given(
    st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=30),
    st.sets(st.integers(min_value=0, max_value=5)),
)
def test_two_members_own_each_workload_and_pool_exactly_once(
    keys: list[str], mine: set[int]
) -> None:
    a = Ownership(6, frozenset(mine), 6, frozenset(mine))
    b = Ownership(6, frozenset(set(range(6)) - mine), 6, frozenset(set(range(6)) - mine))
    for key in keys:
        assert a.owns_workload(key) != b.owns_workload(key)
        assert a.owns_pool(key) != b.owns_pool(key)


def test_stage1_publishes_an_unchanged_recommendation_only_every_republish_seconds() -> None:
    core = new("stage1")
    core.on_workload(state(2, 0.0))
    published = []
    for t in range(1000, 1040):
        for w in windows(float(t), 100.0):  # steady: the same desire every second
            core.on_window(w)
        if core.decide(WL, float(t)).recommendation is not None:
            published.append(t)
    assert published == [1000, 1030]
    for w in windows(1041.0, 2000.0):  # a new desire goes out at once
        core.on_window(w)
    assert core.decide(WL, 1041.0).recommendation is not None


def test_stage2_allocates_a_pool_only_once_its_members_could_recommend() -> None:
    core = new("stage2")
    core.on_node(NodeState(node="n1", pool="default", allocatable={"cpu": 64.0}))
    split = Split()
    split.stage2 = core
    split.on_workload(state(2, 999.0))
    for c in (split.stage1, core):
        c.on_node(NodeState(node="n1", pool="default", allocatable={"cpu": 64.0}))
    core.assign(Ownership.all(), now=1000.0)
    split.step(1000.0, 1400.0)
    assert "after an assignment" in core.decide_pool("default", 1001.0).note
    assert core.decide_pool("default", 1003.0).decisions


def test_stage2_sends_a_request_not_taken_up_again_on_a_recommendation_after_the_grace() -> None:
    split = Split()
    split.on_workload(state(2, 999.0))
    d1 = split.step(1000.0, 280.0)  # 280 / 70 per pod: 2 -> 4, within the rate
    assert d1 is not None
    grace = split.stage2.pending_grace
    assert split.step(1000.0 + grace - 1, 280.0) is None  # in flight: not again yet
    split.stage1.republish_seconds = 0.0  # stage 1's periodic republication, now
    retry = split.step(1000.0 + grace, 280.0)
    assert retry is not None and retry.seq == 2 and retry.to_replicas == d1.to_replicas


def test_a_checkpoint_read_at_an_assignment_goes_to_the_stage_that_owns_its_key() -> None:
    from governor.cores.decider_memory import restoring_stages
    from governor.events import DeciderCheckpoint

    def cp(key: str, seq: int) -> DeciderCheckpoint:
        return DeciderCheckpoint(workload=key, seq=seq)

    assert restoring_stages(cp("ns/Deployment/web", 0)) == (0,)
    # a one-instance decider's checkpoint also seeds stage 2's seq (it never goes back)
    assert restoring_stages(cp("ns/Deployment/web", 7)) == (0, 1)
    # stage 2's decisions also seed stage 1's seq (pass-through continues it)
    assert restoring_stages(cp("decision:ns/Deployment/web", 7)) == (0, 1)
    assert restoring_stages(cp("pool:gpu", 3)) == (1,)


def _late_split(inventory: bool) -> Split:
    """10 pods serving 10 rps (the metric asks for the minimum, 2): stage 1 recommends 10 until
    the 10 recorded first ages out of the 300 s scale-down stabilization window. A 5 s step:
    input later than its floor by 10 s holds."""
    split = Split()
    for core in (split.stage1, split.stage2):
        core.step_seconds = 5.0
        if inventory:
            core.on_node(NodeState(node="n1", pool="default", allocatable={"cpu": 64.0}))
    split.stage1.republish_seconds = 0.0  # a recommendation every evaluation, as with inventory
    split.on_workload(state(10, 999.0))
    return split


def _stage2(split: Split, now: float, inventory: bool) -> ScaleDecision | None:
    if inventory:
        decisions = split.stage2.decide_pool("default", now).decisions
        return decisions[0] if decisions else None
    return split.stage2.decide(WL, now).decision


@pytest.mark.parametrize("inventory", [False, True], ids=["bounds-only", "pool"])
def test_stage2_holds_a_scale_down_whose_recommendation_arrives_late(inventory: bool) -> None:
    """A recommendation stage 1 made on fresh input, held in transit (its decider cut off from
    the broker for 20 s, the publish acknowledged at the heal): stage 2 must not lower replicas
    on it, though stage 1 rightly did not hold it. The next fresh one lowers them."""
    split = _late_split(inventory)
    t, late = 1000.0, None
    while late is None:
        t += 5.0
        for w in windows(t, 10.0):
            split.stage1.on_window(w)
        rec = split.stage1.decide(WL, t).recommendation
        assert rec is not None
        if rec.desired < 10:
            late = rec  # the stabilization window aged out: a scale-down, on fresh input
            break
        split.stage2.on_recommendation(rec)
        assert _stage2(split, t, inventory) is None
    assert not any(r.rule == "stale_hold" for r in late.reasons)
    split.stage2.on_recommendation(late)
    assert _stage2(split, late.computed_at + 20.8, inventory) is None
    t = late.computed_at + 21.0
    for w in windows(t, 10.0):
        split.stage1.on_window(w)
    fresh = split.stage1.decide(WL, t).recommendation
    assert fresh is not None
    split.stage2.on_recommendation(fresh)
    d = _stage2(split, t, inventory)
    assert d is not None and d.to_replicas == fresh.desired < 10


@settings(max_examples=30, deadline=None)
@given(
    st.floats(min_value=0.0, max_value=60.0),
    st.lists(st.floats(min_value=0.0, max_value=4.0), min_size=80, max_size=80),
)
def test_a_steady_transit_delay_with_jitter_does_not_hold_stage2(
    delay: float, jitter: list[float]
) -> None:
    """Every recommendation reaching stage 2 `delay` s (+ under a step of jitter) after stage 1
    made it (a slow link, a skewed clock): the floor absorbs it, the scale-down goes through."""
    split = _late_split(inventory=False)
    decided = None
    for i, extra in enumerate(jitter):
        t = 1005.0 + 5.0 * i
        for w in windows(t, 10.0):
            split.stage1.on_window(w)
        rec = split.stage1.decide(WL, t).recommendation
        assert rec is not None
        split.stage2.on_recommendation(rec)
        decided = decided or _stage2(split, t + delay + extra, inventory=False)
    assert decided is not None and decided.to_replicas < 10
