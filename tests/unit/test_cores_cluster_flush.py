"""When the cluster collector's core flushes (no I/O): not before start-up is over, never while
it does not lead, `coalesce_s` after the first tick that saw a change, a backoff more after a
failed flush; and what it flushes is the model's changes."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from governor.cores import cluster_flush as cf
from governor.cores.cluster import ClusterCore, Watched
from governor.cores.cluster_flush import ClusterFlush, ClusterInput
from governor.events import NodeState
from governor.inventory import Node


def node(name: str, cpu: int = 8) -> Node:
    return msgspec.convert(
        {
            "metadata": {"name": name, "labels": {"governor.dev/pool": "a"}},
            "status": {"allocatable": {"cpu": str(cpu)}},
        },
        Node,
    )


def started(coalesce_s: float = 0.2) -> ClusterFlush:
    core = ClusterFlush(ClusterCore(), coalesce_s=coalesce_s)
    core.on(cf.Started())
    return core


def test_a_change_flushes_coalesce_s_after_the_first_tick_that_saw_it() -> None:
    core = started()
    core.on(Watched("node", "n1", None, node("n1")))
    assert core.tick(10.0).records == []  # the burst starts here
    core.on(Watched("node", "n1", None, node("n1", cpu=9)))
    assert core.tick(10.19).records == []
    out = core.tick(10.2).records
    assert [(c.table, c.key) for c in out] == [("cluster", "n1")]
    assert isinstance(out[0].value, NodeState) and out[0].value.allocatable == {"cpu": 9.0}
    assert core.flushes == 1
    assert core.tick(11.0).records == [], "nothing dirty: nothing to flush"


def test_nothing_before_start_up_is_over() -> None:
    core = ClusterFlush(ClusterCore(), coalesce_s=0.0)
    core.on(Watched("node", "n1", None, node("n1")))
    assert core.tick(1.0).records == [] and core.tick(100.0).records == []
    core.on(cf.Started())
    assert [c.key for c in core.tick(101.0).records] == ["n1"]


def test_a_follower_keeps_its_changes_until_it_leads_and_reread_the_tables() -> None:
    core = ClusterFlush(ClusterCore(), coalesce_s=0.0, leading=False)
    core.on(cf.Started())
    core.on(Watched("node", "n1", None, node("n1")))
    core.on(Watched("node", "n2", None, node("n2")))
    assert core.tick(1.0).records == []
    # the previous leader published n1 as it is now: only n2 is left to send
    seen = ClusterFlush(ClusterCore(), coalesce_s=0.0)
    seen.on(cf.Started())
    seen.on(Watched("node", "n1", None, node("n1")))
    n1 = seen.tick(0.5).records[0]
    assert n1.value is not None
    core.on(cf.Loaded({"cluster": {"n1": n1.value}}))
    assert [c.key for c in core.tick(2.0).records] == ["n2"]
    core.on(cf.Lead(False))
    core.on(Watched("node", "n2", None, node("n2", cpu=4)))
    assert core.tick(3.0).records == []


def test_an_undelivered_flush_is_recomputed_after_a_backoff() -> None:
    core = started(coalesce_s=0.2)
    core.on(Watched("node", "n1", None, node("n1")))
    core.tick(0.0)
    first = core.tick(0.2).records
    assert [c.key for c in first] == ["n1"]
    core.undelivered()  # nothing acknowledged: n1 is sent again, 0.2 + 0.5 s later
    assert core.wait_s() == 0.2 + 0.5
    core.tick(1.0)
    assert core.tick(1.69).records == []
    assert [(c.table, c.key) for c in core.tick(1.7).records] == [(c.table, c.key) for c in first]
    core.undelivered()
    assert core.wait_s() == 0.2 + 1.0, "the backoff doubles while flushes fail"
    core.tick(2.0)
    again = core.tick(3.2).records
    for ch in again:
        core.acknowledge(ch)
    core.delivered()
    assert core.wait_s() == 0.2
    core.on(cf.Resync())
    core.tick(4.0)
    assert core.tick(4.2).records == [], "a resync of what was acknowledged sends nothing"


def test_a_compute_that_raises_is_reported_and_retried() -> None:
    model = ClusterCore()
    core = ClusterFlush(model, coalesce_s=0.0)
    core.on(cf.Started())
    broken = True
    compute = model.compute

    def flaky(now: float) -> Any:
        if broken:
            raise RuntimeError("a bug")
        return compute(now)

    model.compute = flaky  # type: ignore[method-assign]
    core.on(Watched("node", "n1", None, node("n1")))
    assert core.tick(1.0).records == []
    [failure] = model.take_reports()
    assert failure.kind == "failure" and "a bug" in failure.text
    broken = False
    core.tick(1.1)
    assert core.tick(1.59).records == []
    assert [c.key for c in core.tick(1.6).records] == ["n1"]


def test_inputs_reach_the_model() -> None:
    core = started(coalesce_s=0.0)
    core.on(cf.TargetSeen(("apps/v1", "Deployment"), "missing"))
    assert core.model.target_status == {("apps/v1", "Deployment"): "missing"}
    core.on(cf.DevicesServed(True))
    assert core.model.devices_served and core.model.dirty


inputs = st.one_of(
    st.builds(
        lambda i, cpu: Watched("node", f"n{i}", None, node(f"n{i}", cpu)),
        st.integers(0, 3),
        st.integers(1, 4),
    ),
    st.just(cf.Resync()),
    st.builds(cf.Lead, st.booleans()),
    st.just(cf.Loaded({})),
    st.just(cf.Started()),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(inputs, st.floats(0.0, 1.0)), max_size=30))
def test_no_flush_before_start_or_while_following_and_none_within_coalescing(
    steps: list[tuple[ClusterInput, float]],
) -> None:
    core = ClusterFlush(ClusterCore(), coalesce_s=0.3, leading=False)
    now, first_dirty_tick = 0.0, None
    for record, dt in steps:
        core.on(record)
        now += dt
        can = core.started and core.leading and core.model.dirty
        if can and first_dirty_tick is None:
            first_dirty_tick = now
        out = core.tick(now).records
        if out:
            assert core.started and core.leading
            # As the core measures it (due = first tick + coalesce_s): `now - first` can fall an
            # ulp short of 0.3 where `now >= first + 0.3` holds.
            assert first_dirty_tick is not None and now >= first_dirty_tick + 0.3
            for ch in out:
                core.acknowledge(ch)
            core.delivered()
        if not can or not core.model.dirty:  # the gate closed, or the flush ran
            first_dirty_tick = None
