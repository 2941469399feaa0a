"""policy.rebalance: stage 2's allocation glue — priorities, damping, failures, shortfalls."""

from __future__ import annotations

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from governor.events import Device, NodeState, Reason, Recommendation
from governor.policy import elastic as el
from governor.policy.rebalance import RESOLVED, Member, plan, shortfall_updates
from governor.spec import ElasticSpec

POOL = "gpu"
NOW = 50_000.0
JOB = ElasticSpec(
    floor=4, restart_penalty_seconds=30, scaling_efficiency=0.9, min_resize_interval_seconds=300
)
SERVICE_REQ = {"nvidia.com/gpu": 1.0, "cpu": 2.0}
JOB_REQ = {"nvidia.com/gpu": 1.0, "koordinator.sh/rdma": 1.0, "cpu": 4.0}
JOINT = {"deviceTypes": ["gpu", "rdma"], "requiredScope": "SamePCIe"}


def node(name: str, gpus: int = 8, switches: int = 4, **health: bool) -> NodeState:
    """gpus GPUs over `switches` PCIe switches, one 8-VF NIC per switch (minor = switch)."""
    devices = [
        Device(type="gpu", minor=m, pcie=str(m * switches // gpus), numa=m * 2 // gpus)
        for m in range(gpus)
    ] + [
        Device(type="rdma", minor=s, pcie=str(s), numa=s * 2 // switches, free=8, total=8)
        for s in range(switches)
    ]
    devices = [
        msgspec.structs.replace(d, healthy=health.get(f"{d.type}{d.minor}", True)) for d in devices
    ]
    return NodeState(node=name, pool=POOL, allocatable={"cpu": 96.0}, devices=devices)


def rec(
    name: str,
    desired: int,
    *,
    priority: int = 0,
    elastic: bool = False,
    floor: int = 1,
    max_replicas: int = 16,
) -> Recommendation:
    return Recommendation(
        workload=f"ns/Deployment/{name}",
        pool=POOL,
        desired=desired,
        current=0,
        ready=0,
        min_replicas=1,
        max_replicas=max_replicas,
        floor=floor,
        priority=priority,
        weight=1.0,
        requests=JOB_REQ if elastic else SERVICE_REQ,
        elastic=elastic,
        reasons=[Reason(rule="metric", detail="stage 1")],
        inputs=[],
        newest_input=NOW - 1,
        policy_generation=1,
        computed_at=NOW,
        joint_allocate=JOINT if elastic else None,
    )


def service(desired: int, current: int) -> Member:
    return Member(rec=rec("web", desired, priority=1000, floor=2), current=current)


def job(
    current: int, desired: int = 16, state: el.ElasticState | None = None, name: str = "train"
) -> Member:
    return Member(
        rec=rec(name, desired, elastic=True, floor=4),
        current=current,
        elastic=JOB,
        state=state or el.ElasticState(),
        started_at=NOW - 7200,
    )


WEB, TRAIN = "ns/Deployment/web", "ns/Deployment/train"
NODES = [node("a"), node("b")]


def test_room_for_everyone_gives_every_want() -> None:
    p = plan([service(4, 4), job(12, desired=12)], NODES, pool=POOL, now=NOW)
    assert {w: t.replicas for w, t in p.targets.items()} == {WEB: 4, TRAIN: 12}
    assert p.shortfalls == []
    assert p.targets[WEB].reasons[0].detail == "stage 1"  # stage 1's reasons come first


def test_burst_of_a_higher_tier_shrinks_the_job_to_its_floor_at_once() -> None:
    recent = el.ElasticState(last_resize_at=NOW - 10)  # damping would hold a voluntary resize
    p = plan([service(12, 4), job(12, state=recent)], NODES, pool=POOL, now=NOW)
    assert p.targets[WEB].replicas == 12
    t = p.targets[TRAIN]
    assert t.replicas == 4
    assert t.verdict is not None and t.verdict.forced
    # allocate names device_fit first when no node can place one more replica's GPUs.
    assert t.reasons[-1].rule in ("priority", "device_fit")
    assert "tier 0" in t.reasons[-1].detail
    (sf,) = p.shortfalls
    assert (sf.workload, sf.wanted, sf.granted, sf.pool) == (TRAIN, 16, 4, POOL)
    assert sf.reason.split(":")[0] in ("priority", "device_fit")
    assert sf.resources["nvidia.com/gpu"] == 12


def test_a_held_grow_leaves_its_room_to_others_in_the_same_cycle() -> None:
    recent = el.ElasticState(last_resize_at=NOW - 60)
    other = Member(rec=rec("batch", 16, priority=-10, floor=1), current=1)
    p = plan([service(4, 4), job(4, state=recent), other], NODES, pool=POOL, now=NOW)
    t = p.targets[TRAIN]
    assert t.replicas == 4
    assert any(r.rule == "restart_damping" for r in t.reasons)
    assert p.rounds == 2
    # The lower tier gets what the held job did not take: 16 GPUs − web 4 − job 4.
    assert p.targets["ns/Deployment/batch"].replicas == 8
    # The job is short of capacity on its own account (the pool could give it 12 of 16 alone).
    assert any(s.workload == TRAIN for s in p.shortfalls)


def test_after_the_interval_the_job_takes_its_gpus_back_in_one_resize() -> None:
    state = el.ElasticState(last_resize_at=NOW - 900)
    targets = []
    t = NOW
    for _ in range(40):
        p = plan([service(4, 4), job(4, state=state)], NODES, pool=POOL, now=t)
        target = p.targets[TRAIN]
        assert target.state is not None
        state = target.state
        targets.append(target.replicas)
        if target.replicas != 4:
            break
        t += 5
    assert targets[-1] == 12
    assert set(targets[:-1]) <= {4}


def test_nic_failure_recomputes_and_the_higher_tier_keeps_its_replicas() -> None:
    before = plan([service(6, 6), job(10, desired=10)], NODES, pool=POOL, now=NOW)
    assert before.targets[TRAIN].replicas == 10
    # NIC 0 and 1 of node b go down: its GPUs on switches 0-1 cannot serve the job (SamePCIe).
    broken = [node("a"), node("b", rdma0=False, rdma1=False)]
    after = plan(
        [service(6, 6), job(10, desired=10)], broken, before.allocation, pool=POOL, now=NOW + 5
    )
    assert after.targets[WEB].replicas == 6
    assert after.targets[TRAIN].replicas == 10  # web moves onto the GPUs without a NIC
    # Node a loses GPUs too: now the job must give way to the service.
    worse = [node("a", gpu0=False, gpu1=False, gpu2=False), node("b", rdma0=False, rdma1=False)]
    p = plan([service(6, 6), job(10, desired=10)], worse, after.allocation, pool=POOL, now=NOW + 10)
    assert p.targets[WEB].replicas == 6
    assert p.targets[TRAIN].replicas == 7  # a: 5 GPUs with NICs, b: 4, minus web's overflow
    assert p.targets[TRAIN].verdict is not None and p.targets[TRAIN].verdict.forced
    assert [s.workload for s in p.shortfalls] == [TRAIN]


def test_node_down_keeps_floors_then_serves_the_higher_tier() -> None:
    down = [node("a"), msgspec.structs.replace(node("b"), ready=False)]
    p = plan([service(6, 6), job(10, desired=10)], down, pool=POOL, now=NOW)
    # 8 GPUs left: every floor first (web 2, job 4), then above-floor by tier: web takes the rest.
    assert p.targets[TRAIN].replicas == 4
    assert p.targets[WEB].replicas == 4
    assert p.targets[TRAIN].verdict is not None and p.targets[TRAIN].verdict.forced
    assert {s.workload: s.granted for s in p.shortfalls} == {WEB: 4, TRAIN: 4}
    web_short = next(s for s in p.shortfalls if s.workload == WEB)
    assert web_short.reason.split(":")[0] in ("floor", "device_fit", "capacity")


def test_shortfalls_are_published_once_per_change_and_resolved_once() -> None:
    p = plan([service(12, 4), job(12)], NODES, pool=POOL, now=NOW)
    sent, memory = shortfall_updates({}, p.shortfalls, p.targets, pool=POOL, now=NOW)
    assert [s.workload for s in sent] == [TRAIN]
    again, memory = shortfall_updates(memory, p.shortfalls, p.targets, pool=POOL, now=NOW + 1)
    assert again == []
    calm = plan([service(4, 4), job(12, desired=12)], NODES, pool=POOL, now=NOW + 2)
    resolved, memory = shortfall_updates(memory, calm.shortfalls, calm.targets, pool=POOL, now=3)
    assert [(s.workload, s.reason, s.wanted, s.granted) for s in resolved] == [
        (TRAIN, RESOLVED, 12, 12)
    ]
    assert memory == {}


# --- properties -------------------------------------------------------------------------------


# Each workload's desired count, and what it runs now (at most the pool's 16 GPUs).
wanted, running = st.integers(0, 20), st.integers(0, 16)


@settings(max_examples=60, deadline=None)
@given(
    web=wanted,
    web_now=running,
    train=wanted,
    train_now=running,
    since=st.floats(0, 2000),
    bad_gpus=st.sets(st.integers(0, 7), max_size=6),
    bad_nics=st.sets(st.integers(0, 3), max_size=3),
)
def test_plan_properties(
    web: int,
    web_now: int,
    train: int,
    train_now: int,
    since: float,
    bad_gpus: set[int],
    bad_nics: set[int],
) -> None:
    health = {f"gpu{g}": False for g in bad_gpus} | {f"rdma{n}": False for n in bad_nics}
    nodes = [node("a"), node("b", **health)]
    state = el.ElasticState(last_resize_at=NOW - since)
    ms = [service(web, web_now), job(train_now, desired=train, state=state)]
    p = plan(ms, nodes, pool=POOL, now=NOW)
    healthy = 16 - len(bad_gpus)
    total = sum(t.replicas for t in p.targets.values())
    # Targets fit the healthy GPUs and never exceed what is wanted — except a held job, which
    # keeps what it runs (and then only when that still fits: the pin goes through allocation).
    assert total <= healthy
    for m in ms:
        t = p.targets[m.rec.workload]
        held = t.verdict is not None and t.verdict.kind == "hold"
        # An elastic job's voluntary shrink may be damped: it keeps up to what it runs.
        assert t.replicas <= (max(t.wanted, m.current) if m.elastic else t.wanted)
        # Whatever is below the want says why.
        if t.replicas < t.wanted:
            assert {r.rule for r in t.reasons} & {
                "priority",
                "capacity",
                "device_fit",
                "fair_share",
                "floor",
                "restart_damping",
            }
        if held:
            assert t.replicas == m.current
    # The higher tier is never short while the lower tier holds above-floor replicas.
    w, j = p.targets[WEB], p.targets[TRAIN]
    if w.replicas < w.wanted:
        jv = j.verdict
        assert j.replicas <= 4 or (jv is not None and jv.kind == "hold") or bad_nics or bad_gpus
    # Shortfalls name only workloads granted less than they wanted.
    for s in p.shortfalls:
        assert s.granted < s.wanted
