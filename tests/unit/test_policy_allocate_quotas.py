"""Allocation under namespace ResourceQuotas and Volcano Queues (governor.policy.quotas)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from governor.events import NodeState, QueueState, QuotaState
from governor.policy.allocate import Allocation, Demand, allocate
from governor.policy.quotas import Constraints, constraints

WEB = "shop/Deployment/web"
API = "shop/Deployment/api"
OTHER = "misc/Deployment/other"


def node(name: str, cpu: float, **kw: object) -> NodeState:
    return NodeState(node=name, pool="p", allocatable={"cpu": cpu, "memory": 1e12}, **kw)  # type: ignore[arg-type]


def demand(name: str, want: int, cpu: float = 1.0, **kw: object) -> Demand:
    return Demand(workload=name, want=want, requests={"cpu": cpu}, **kw)  # type: ignore[arg-type]


def quota(
    name: str, hard: Mapping[str, float], covers: Mapping[str, Mapping[str, float]], **kw: object
) -> QuotaState:
    ns = name.partition("/")[0]
    return QuotaState(
        quota=name,
        namespace=ns,
        hard=dict(hard),
        covers={w: dict(c) for w, c in covers.items()},
        **kw,
    )  # type: ignore[arg-type]


def cons(
    ds: list[Demand],
    quotas: Sequence[QuotaState] = (),
    queues: Sequence[QueueState] = (),
    current: Mapping[str, int] | None = None,
) -> Constraints:
    return constraints(quotas, queues, [d.workload for d in ds], current or {})


def test_a_quota_caps_the_namespace_and_the_reason_names_it() -> None:
    ds = [demand(WEB, 10, cpu=4), demand(OTHER, 5)]
    q = quota(
        "shop/compute-quota",
        {"requests.cpu": 40},
        {WEB: {"requests.cpu": 4}},
        unmanaged={"requests.cpu": 14},
    )
    a = allocate(ds, [node("n1", 100)], constraints=cons(ds, [q]))
    web = a.grants[WEB]
    assert a.replicas() == {WEB: 6, OTHER: 5}
    assert web.rule == "capacity" and web.limit == "quota:shop/compute-quota"
    assert web.detail.startswith("quota: shop/compute-quota requests.cpu 38/40 -> 6")
    assert web.missing == {"requests.cpu": 16}


def test_count_pods_limits_and_extended_resources_each_bind() -> None:
    ds = [demand(WEB, 10, cpu=1), demand(API, 10, cpu=1)]
    pods = quota(
        "shop/pods",
        {"count/pods": 7, "limits.cpu": 100},
        {WEB: {"count/pods": 1, "limits.cpu": 2}, API: {"count/pods": 1, "limits.cpu": 30}},
    )
    a = allocate(ds, [node("n1", 100)], constraints=cons(ds, [pods]))
    # limits.cpu: api's replicas need 30 each, so 3 of them at most; count/pods: 7 in all.
    assert a.replicas()[API] <= 3 and sum(a.replicas().values()) == 7
    assert "count/pods 7/7" in a.grants[WEB].detail or "limits.cpu" in a.grants[API].detail
    gpu = [Demand(workload=WEB, want=4, requests={"cpu": 1.0, "nvidia.com/gpu": 1.0})]
    gq = quota("shop/gpu", {"requests.nvidia.com/gpu": 2}, {WEB: {"requests.nvidia.com/gpu": 1}})
    from governor.events import Device

    gpus = [Device(type="gpu", minor=i, free=100.0, total=100.0) for i in range(8)]
    a = allocate(gpu, [node("g1", 32, devices=gpus)], constraints=cons(gpu, [gq]))
    assert a.replicas() == {WEB: 2}
    assert "requests.nvidia.com/gpu 2/2 -> 2" in a.grants[WEB].detail


def test_covered_workloads_of_other_pools_count_at_what_they_run() -> None:
    ds = [demand(WEB, 10)]
    q = quota("shop/q", {"requests.cpu": 10}, {WEB: {"requests.cpu": 1}, API: {"requests.cpu": 1}})
    a = allocate(ds, [node("n1", 100)], constraints=cons(ds, [q], current={API: 7}))
    assert a.replicas() == {WEB: 3}


def test_a_queue_capability_stops_a_job_while_another_queue_has_room() -> None:
    job = "research/Job/train"
    svc = "prod/Deployment/web"
    ds = [
        Demand(workload=job, want=8, requests={"cpu": 1.0}, elastic=True),
        Demand(workload=svc, want=3, requests={"cpu": 1.0}),
    ]
    queues = [
        QueueState(queue="research", capability={"cpu": 4}, covers={job: {"cpu": 1}}),
        QueueState(queue="prod", capability={"cpu": 50}, covers={svc: {"cpu": 1}}),
    ]
    a = allocate(ds, [node("n1", 64)], constraints=cons(ds, queues=queues))
    assert a.replicas() == {job: 4, svc: 3}
    assert a.grants[job].limit == "queue:research"
    assert a.grants[job].detail.startswith("queue: research capability cpu 4/4 -> 4")


def test_a_parent_queue_capability_covers_its_children() -> None:
    a1, a2 = "t/Job/a1", "t/Job/a2"
    ds = [demand(a1, 5), demand(a2, 5)]
    queues = [
        QueueState(queue="team", capability={"cpu": 6}),
        QueueState(queue="team-a", parent="team", covers={a1: {"cpu": 1}}),
        QueueState(queue="team-b", parent="team", covers={a2: {"cpu": 1}}),
    ]
    a = allocate(ds, [node("n1", 64)], constraints=cons(ds, queues=queues))
    assert sum(a.replicas().values()) == 6
    assert {g.limit for g in a.grants.values()} == {"queue:team"}


def test_a_guarantee_holds_against_a_higher_tier_of_another_queue() -> None:
    low, high = "a/Job/low", "b/Deployment/high"
    ds = [demand(low, 6), demand(high, 20, tier=10)]
    queues = [
        QueueState(queue="a", guarantee={"cpu": 4}, covers={low: {"cpu": 1}}),
        QueueState(queue="b", covers={high: {"cpu": 1}}),
    ]
    a = allocate(ds, [node("n1", 10)], constraints=cons(ds, queues=queues))
    assert a.replicas() == {low: 4, high: 6}
    assert a.grants[high].limit == "queue:a"
    assert "guarantee" in a.grants[high].detail
    # Without the queues, strict tiers: the higher tier takes the node.
    assert allocate(ds, [node("n1", 10)]).replicas() == {low: 0, high: 10}


def test_deserved_shapes_the_share_inside_a_tier() -> None:
    x, y = "x/Deployment/a", "y/Deployment/b"
    ds = [demand(x, 10, weight=5.0), demand(y, 10)]
    queues = [
        QueueState(queue="x", deserved={"cpu": 3}, covers={x: {"cpu": 1}}),
        QueueState(queue="y", deserved={"cpu": 7}, covers={y: {"cpu": 1}}),
    ]
    a = allocate(ds, [node("n1", 10)], constraints=cons(ds, queues=queues))
    assert a.replicas() == {x: 3, y: 7}
    # Room nobody deserves more of still goes out.
    a = allocate(ds, [node("n1", 16)], constraints=cons(ds, queues=queues))
    assert sum(a.replicas().values()) == 16 and a.replicas()[y] >= 7


def test_weights_divide_the_pool_when_no_queue_sets_deserved() -> None:
    x, y = "x/Deployment/a", "y/Deployment/b"
    ds = [demand(x, 20), demand(y, 20)]
    queues = [
        QueueState(queue="x", weight=3, covers={x: {"cpu": 1}}),
        QueueState(queue="y", weight=1, covers={y: {"cpu": 1}}),
    ]
    a = allocate(ds, [node("n1", 12)], constraints=cons(ds, queues=queues))
    assert a.replicas() == {x: 9, y: 3}


def test_a_non_reclaimable_queue_keeps_what_it_holds() -> None:
    held, rival = "r/Job/held", "s/Deployment/rival"
    queues = [
        QueueState(queue="r", reclaimable=False, covers={held: {"cpu": 1}}),
        QueueState(queue="s", covers={rival: {"cpu": 1}}),
    ]
    first = [demand(held, 8), demand(rival, 0, tier=5)]
    before = allocate(first, [node("n1", 10)], constraints=cons(first, queues=queues))
    assert before.replicas()[held] == 8
    later = [demand(held, 8), demand(rival, 10, tier=5)]
    after = allocate(later, [node("n1", 10)], before, constraints=cons(later, queues=queues))
    assert after.replicas() == {held: 8, rival: 2}
    queues[0] = QueueState(queue="r", reclaimable=True, covers={held: {"cpu": 1}})
    after = allocate(later, [node("n1", 10)], before, constraints=cons(later, queues=queues))
    assert after.replicas()[rival] > 2


def test_hysteresis_never_keeps_an_allocation_a_quota_now_refuses() -> None:
    ds = [demand(WEB, 8)]
    before = allocate(ds, [node("n1", 100)])
    assert before.replicas() == {WEB: 8}
    q = quota("shop/q", {"requests.cpu": 5}, {WEB: {"requests.cpu": 1}})
    after = allocate(ds, [node("n1", 100)], before, margin=0.5, constraints=cons(ds, [q]))
    assert not after.kept_previous and after.replicas() == {WEB: 5}
    again = allocate(ds, [node("n1", 100)], after, margin=0.5, constraints=cons(ds, [q]))
    assert again.kept_previous and again.grants[WEB].limit == "quota:shop/q"


# --- properties -------------------------------------------------------------------------------

NAMES = [f"ns{k % 3}/Deployment/w{k}" for k in range(6)]


@st.composite
def pools(draw: st.DrawFn) -> tuple[list[Demand], list[NodeState]]:
    ds = []
    for name in NAMES[: draw(st.integers(1, len(NAMES)))]:
        want = draw(st.integers(0, 8))
        ds.append(
            Demand(
                workload=name,
                want=want,
                floor=draw(st.integers(0, want)),
                tier=draw(st.sampled_from([0, 0, 1, 2])),
                weight=draw(st.sampled_from([1.0, 2.0])),
                elastic=draw(st.booleans()),
                requests={
                    "cpu": draw(st.sampled_from([0.5, 1.0, 2.0])),
                    "memory": draw(st.sampled_from([1.0, 2.0])),
                },
            )
        )
    nodes = [
        NodeState(
            node=f"n{i}",
            pool="p",
            allocatable={"cpu": draw(st.integers(0, 16)), "memory": draw(st.integers(0, 24))},
        )
        for i in range(draw(st.integers(1, 3)))
    ]
    return ds, nodes


@st.composite
def limits(draw: st.DrawFn, ds: list[Demand]) -> tuple[list[QuotaState], list[QueueState]]:
    by_ns: dict[str, list[Demand]] = {}
    for d in ds:
        by_ns.setdefault(d.workload.partition("/")[0], []).append(d)
    quotas = []
    for ns, members in sorted(by_ns.items()):
        if draw(st.booleans()):
            covered = [d for d in members if draw(st.booleans())] or members
            quotas.append(
                QuotaState(
                    quota=f"{ns}/q",
                    namespace=ns,
                    hard={
                        "requests.cpu": float(draw(st.integers(0, 12))),
                        "count/pods": float(draw(st.integers(0, 10))),
                    },
                    unmanaged={"requests.cpu": float(draw(st.integers(0, 3)))},
                    covers={
                        d.workload: {"requests.cpu": d.requests["cpu"], "count/pods": 1.0}
                        for d in covered
                    },
                )
            )
    queues = []
    split = draw(st.integers(0, len(ds)))
    for name, members in (("qa", ds[:split]), ("qb", ds[split:])):
        if members and draw(st.booleans()):
            queues.append(
                QueueState(
                    queue=name,
                    capability={"memory": float(draw(st.integers(0, 20)))},
                    guarantee={"cpu": float(draw(st.integers(0, 6)))},
                    deserved={"cpu": float(draw(st.integers(0, 10)))}
                    if draw(st.booleans())
                    else {},
                    weight=draw(st.integers(1, 3)),
                    reclaimable=draw(st.booleans()),
                    covers={d.workload: dict(d.requests) for d in members},
                )
            )
    return quotas, queues


def _within_limits(alloc: Allocation, c: Constraints) -> None:
    for lim in c.limits:
        for r, total in lim.total.items():
            use = sum(alloc.grants[w].replicas * cost.get(r, 0.0) for w, cost in lim.cost.items())
            room = max(0.0, total - lim.fixed.get(r, 0.0))
            assert use <= room + 1e-9, (lim.name, r, use, room)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_grants_never_exceed_a_quota_or_queue_capability(data: st.DataObject) -> None:
    ds, nodes = data.draw(pools())
    quotas, queues = data.draw(limits(ds))
    c = cons(ds, quotas, queues)
    alloc = allocate(ds, nodes, constraints=c)
    _within_limits(alloc, c)
    # ... also when a previous allocation (made without them) is handed back.
    before = allocate(ds, nodes)
    again = allocate(ds, nodes, before, margin=0.5, constraints=c)
    _within_limits(again, c)
    assert all(g.replicas <= g.wanted for g in again.grants.values())


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_limits_that_never_bind_change_nothing(data: st.DataObject) -> None:
    """The constrained path orders replicas exactly as today's allocation: with quotas and one
    queue too large to bind, every grant equals the allocation without them."""
    ds, nodes = data.draw(pools())
    covered = [d for d in ds if data.draw(st.booleans())] or ds
    quotas = [
        QuotaState(
            quota="ns0/big",
            namespace="ns0",
            hard={"requests.cpu": 1e6, "count/pods": 1e6},
            covers={
                d.workload: {"requests.cpu": d.requests["cpu"], "count/pods": 1.0} for d in covered
            },
        )
    ]
    queues = [
        QueueState(
            queue="all", capability={"cpu": 1e6}, covers={d.workload: dict(d.requests) for d in ds}
        )
    ]
    c = cons(ds, quotas, queues)
    assert not c.empty
    plain = allocate(ds, nodes)
    limited = allocate(ds, nodes, constraints=c)
    assert limited.replicas() == plain.replicas()
    assert {w: g.rule for w, g in limited.grants.items()} == {
        w: g.rule for w, g in plain.grants.items()
    }
    assert allocate(ds, nodes, constraints=Constraints()) == plain
    assert allocate(ds, nodes, constraints=cons(ds)) == plain


def _held(alloc: Allocation, ds: list[Demand], members: set[str]) -> float:
    return sum(
        alloc.grants[d.workload].replicas * d.requests["cpu"] for d in ds if d.workload in members
    )


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_a_queue_keeps_its_guarantee_whatever_another_queue_asks(data: st.DataObject) -> None:
    """On one node (no packing effects), queue A's cpu with queue B's demand added is at least
    min(what A gets alone, A's guarantee), short of that by less than one of A's replicas (the
    guarantee is an amount, replicas are whole)."""
    ds, nodes = data.draw(pools())
    # The guarantee names cpu alone, so cpu is the only resource (a memory-bound node is not
    # what a cpu guarantee promises) and one node.
    ds = [msgspec.structs.replace(d, requests={"cpu": d.requests["cpu"]}) for d in ds]
    nodes = nodes[:1]
    split = data.draw(st.integers(1, len(ds)))
    a_side, b_side = ds[:split], ds[split:]
    cap = int(nodes[0].allocatable["cpu"])
    # Volcano admits guarantees that fit the cluster together: here, the node.
    guarantee = float(data.draw(st.integers(0, cap)))
    qa = QueueState(
        queue="qa",
        guarantee={"cpu": guarantee},
        covers={d.workload: dict(d.requests) for d in a_side},
    )
    qb = QueueState(
        queue="qb",
        weight=data.draw(st.integers(1, 3)),
        guarantee={"cpu": float(data.draw(st.integers(0, cap - int(guarantee))))},
        covers={d.workload: dict(d.requests) for d in b_side},
    )
    members = {d.workload for d in a_side}
    alone = allocate(a_side, nodes, constraints=cons(a_side, queues=[qa]))
    both = allocate(ds, nodes, constraints=cons(ds, queues=[qa, qb]))
    biggest = max(d.requests["cpu"] for d in a_side)
    want = min(_held(alone, a_side, members), guarantee)
    assert _held(both, ds, members) > want - biggest + 1e-9 or want == 0


def test_a_lifted_or_grown_quota_ends_hysteresis() -> None:
    ds = [demand(WEB, 8)]
    tight = quota("shop/q", {"requests.cpu": 5}, {WEB: {"requests.cpu": 1}})
    before = allocate(ds, [node("n1", 100)], constraints=cons(ds, [tight]))
    assert before.replicas() == {WEB: 5} and before.limits == {"quota:shop/q": {"requests.cpu": 5}}
    kept = allocate(ds, [node("n1", 100)], before, margin=0.5, constraints=cons(ds, [tight]))
    assert kept.kept_previous
    grown = quota("shop/q", {"requests.cpu": 7}, {WEB: {"requests.cpu": 1}})
    after = allocate(ds, [node("n1", 100)], before, margin=0.5, constraints=cons(ds, [grown]))
    assert not after.kept_previous and after.replicas() == {WEB: 7}
    lifted = allocate(ds, [node("n1", 100)], before, margin=0.5)
    assert not lifted.kept_previous and lifted.replicas() == {WEB: 8}
