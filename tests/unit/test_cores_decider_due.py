"""governor.cores.decider_due through `DeciderCore.tick`: the rule the service's ticker and the
scenario runner share (a workload its load evaluated within the last `LOAD_SKIP_TICKS` ticks is
not due)."""

from __future__ import annotations

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from governor.cores.decider import DeciderCore, pool_key
from governor.cores.decider_due import LOAD_SKIP_TICKS, PartitionLag
from governor.events import NodeState
from governor.ownership import Ownership, partition_of
from tests.unit.test_cores_decider import WL, core_with, window


def ticked(core: DeciderCore, now: float) -> list[str]:
    return [key for key, _ in core.tick(now)]


def test_a_workload_with_load_is_due_on_every_tick_until_its_load_evaluates_it() -> None:
    core = core_with(load=700.0, replicas=2, now=1000.0)
    assert ticked(core, 1000.0) == [WL]
    assert ticked(core, 1001.0) == [WL]  # a tick does not mark it


@settings(max_examples=50, deadline=None)
@given(st.floats(0.1, 10.0), st.floats(0.0, 30.0))
def test_evaluated_on_load_skips_it_for_some_ticks(tick_s: float, later: float) -> None:
    core = core_with(load=700.0, replicas=2, now=1000.0)
    core.tick_seconds = tick_s
    core.decide(WL, 1000.0)
    core.evaluated_on_load([WL], 1000.0)
    now = 1000.0 + later
    skip = LOAD_SKIP_TICKS * tick_s
    # Within an ulp of the boundary the core's `now - skip` against 1000.0 decides either way.
    if abs(later - skip) > 1e-9:
        assert ticked(core, now) == ([] if later < skip else [WL])


def test_a_deleted_policy_and_a_rebalance_forget_when_it_was_evaluated() -> None:
    core = core_with(load=700.0, replicas=2, now=1000.0)
    core.evaluated_on_load([WL], 1000.0)
    core.on_policy("shop/web", None)
    assert WL not in core.evaluated
    core.evaluated_on_load([WL], 1000.0)
    core.assign(Ownership.all(), 1000.0)
    assert core.evaluated == {}


def test_a_split_core_ticks_its_own_stage_only() -> None:
    node = NodeState(node="n1", pool="gpu", allocatable={"cpu": 8.0})
    one, two = DeciderCore(role="stage1"), DeciderCore(role="stage2")
    for core in (one, two):
        core.on_node(node)
        core.assign(Ownership.all(), 0.0)
    assert ticked(one, 10.0) == []  # no load, no member: nothing of stage 2
    assert ticked(two, 10.0) == [pool_key("gpu")]
    both = DeciderCore()
    both.on_node(node)
    assert ticked(both, 10.0) == [pool_key("gpu")]


LIMIT = 2_000
lags = st.dictionaries(st.integers(0, 7), st.integers(0, 2 * LIMIT), max_size=8)


@settings(max_examples=50, deadline=None)
@given(lags, lags, st.frozensets(st.integers(0, 5), min_size=1))
def test_the_tick_leaves_out_the_partitions_behind_by_more_than_behind_records(
    load_lag: dict[int, int], recs_lag: dict[int, int], owned: frozenset[int]
) -> None:
    """The lag is the consumer's, per partition (some not owned: a paused or stale entry): only
    an owned partition more than `behind_records` behind is left out."""
    workloads = [f"shop/Deployment/w{i}" for i in range(40)]
    pools = [f"pool-{i}" for i in range(12)]
    ownership = Ownership(6, owned, 6, owned)
    one, two = DeciderCore(role="stage1"), DeciderCore(role="stage2")
    for core in (one, two):
        core.behind_records = LIMIT
        for i, pool in enumerate(pools):
            core.on_node(NodeState(node=f"n{i}", pool=pool, allocatable={"cpu": 8.0}))
        core.assign(ownership, 0.0)
        for w in workloads:
            core.on_window(msgspec.structs.replace(window(5.0, 100.0), workload=w))
    lag = PartitionLag(load_lag, recs_lag)

    def due(key: str, lags: dict[int, int]) -> bool:
        return partition_of(key, 6) in owned and lags.get(partition_of(key, 6), 0) <= LIMIT

    assert [k for k, _ in one.tick(10.0, lag)] == sorted(w for w in workloads if due(w, load_lag))
    assert [k for k, _ in two.tick(10.0, lag)] == [
        pool_key(p) for p in sorted(pools) if due(p, recs_lag)
    ]
    # Caught up: everything owned is due again; a tick without lag keeps the last one's view.
    caught_up = PartitionLag({}, {})
    assert ticked(one, 11.0) == [k for k, _ in one.tick(11.0, lag)]
    assert [k for k, _ in one.tick(12.0, caught_up)] == sorted(
        w for w in workloads if partition_of(w, 6) in owned
    )
    # A new assignment knows nothing of the old backlog.
    list(one.tick(13.0, lag))
    one.assign(Ownership(6, owned, 6, owned), 20.0)
    for w in workloads:
        one.on_window(msgspec.structs.replace(window(25.0, 100.0), workload=w))
    assert ticked(one, 30.0) == sorted(w for w in workloads if partition_of(w, 6) in owned)
