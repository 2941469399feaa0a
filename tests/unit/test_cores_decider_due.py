"""governor.cores.decider_due through `DeciderCore.tick`: the rule the service's ticker and the
scenario runner share (a workload its load evaluated within the last two ticks is not due)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from governor.cores.decider import DeciderCore, pool_key
from governor.events import NodeState
from governor.ownership import Ownership
from tests.unit.test_cores_decider import WL, core_with


def ticked(core: DeciderCore, now: float) -> list[str]:
    return [key for key, _ in core.tick(now)]


def test_a_workload_with_load_is_due_on_every_tick_until_its_load_evaluates_it() -> None:
    core = core_with(load=700.0, replicas=2, now=1000.0)
    assert ticked(core, 1000.0) == [WL]
    assert ticked(core, 1001.0) == [WL]  # a tick does not mark it


@settings(max_examples=50, deadline=None)
@given(st.floats(0.1, 10.0), st.floats(0.0, 30.0))
def test_evaluated_on_load_skips_it_for_two_ticks(tick_s: float, later: float) -> None:
    core = core_with(load=700.0, replicas=2, now=1000.0)
    core.tick_seconds = tick_s
    core.decide(WL, 1000.0)
    core.evaluated_on_load([WL], 1000.0)
    now = 1000.0 + later
    assert ticked(core, now) == ([] if later < 2 * tick_s else [WL])


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
