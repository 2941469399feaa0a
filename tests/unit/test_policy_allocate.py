"""Pool allocation: floors, tiers, weighted DRF, per-node capacity, devices, hysteresis."""

from __future__ import annotations

import math
import random
from collections import defaultdict

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from governor.events import Device, NodeState, Recommendation
from governor.policy import devices as dev
from governor.policy.allocate import Allocation, Demand, allocate, shortfalls
from tests.unit.test_policy_devices import _check_valid, node_devices

GiB = 2.0**30


def node(name: str, cpu: float, memory: float = 1e6, **kw: object) -> NodeState:
    return NodeState(node=name, pool="p", allocatable={"cpu": cpu, "memory": memory}, **kw)  # type: ignore[arg-type]


def demand(name: str, want: int, cpu: float = 1.0, memory: float = 1.0, **kw: object) -> Demand:
    return Demand(workload=name, want=want, requests={"cpu": cpu, "memory": memory}, **kw)  # type: ignore[arg-type]


# --- the rules, one example each -------------------------------------------------------------


def test_drf_paper_example() -> None:
    # Ghodsi et al. (NSDI'11): 9 CPUs, 18 GB; A runs <1 CPU, 4 GB> tasks, B <3 CPU, 1 GB>.
    a = allocate(
        [demand("a", 100, cpu=1, memory=4), demand("b", 100, cpu=3, memory=1)],
        [node("n", 9, 18)],
    )
    assert a.replicas() == {"a": 3, "b": 2}
    assert {g.rule for g in a.grants.values()} == {"fair_share"}


def test_weights_scale_fair_share() -> None:
    a = allocate(
        [demand("a", 100, weight=1.0), demand("b", 100, weight=2.0), demand("c", 4, weight=1.0)],
        [node("n", 34)],
    )
    assert a.replicas() == {"a": 10, "b": 20, "c": 4}
    assert a.grants["c"].rule == "unchanged"


def test_floors_come_before_any_replica_above_a_floor() -> None:
    a = allocate(
        [demand("high", 10, floor=1, tier=100), demand("low", 10, floor=3, tier=0)], [node("n", 8)]
    )
    assert a.replicas() == {"high": 5, "low": 3}
    assert a.grants["high"].rule == "floor"
    assert a.grants["low"].rule == "priority"


def test_when_floors_do_not_fit_the_lowest_tier_and_then_elastic_lose_them_first() -> None:
    a = allocate(
        [
            demand("top", 3, floor=3, tier=1),
            demand("svc", 2, floor=2, tier=0),
            demand("train", 2, floor=2, tier=0, elastic=True),
        ],
        [node("n", 4)],
    )
    assert a.replicas() == {"top": 3, "svc": 1, "train": 0}
    assert a.grants["train"].rule == "priority"
    assert "even its floor" in a.grants["train"].detail


def test_inside_a_tier_services_grow_before_elastic_training() -> None:
    a = allocate(
        [demand("svc", 6, floor=1), demand("train", 6, floor=1, elastic=True)], [node("n", 8)]
    )
    assert a.replicas() == {"svc": 6, "train": 2}


def test_capacity_is_per_node_not_a_pool_sum() -> None:
    # The pool has 10 CPUs for 9 wanted, but a 3-CPU replica fits only once on a 5-CPU node.
    a = allocate([demand("w", 3, cpu=3)], [node("a", 5), node("b", 5)])
    assert a.replicas() == {"w": 2}
    assert a.placement == {"a": {"w": 1}, "b": {"w": 1}}
    assert a.grants["w"].rule == "capacity"
    assert "4 free in the pool, no node has 3" in a.grants["w"].detail


def test_unmanaged_requests_and_unready_nodes_take_capacity_away() -> None:
    nodes = [
        node("a", 8, requested_unmanaged={"cpu": 6}),
        node("b", 8, ready=False),
        node("c", 8, schedulable=False),
    ]
    assert allocate([demand("w", 9)], nodes).replicas() == {"w": 2}


def test_no_gpu_anywhere_is_a_device_fit_shortfall() -> None:
    ask = Demand(workload="t", want=2, requests={"cpu": 1, dev.GPU: 1, dev.RDMA: 1})
    a = allocate([ask], [node("cpu-only", 64)])
    g = a.grants["t"]
    assert (g.replicas, g.rule) == (0, "device_fit")
    assert g.missing == {dev.GPU: 2.0, dev.RDMA: 2.0}
    [s] = shortfalls(a, "p", at=5.0)
    assert (s.workload, s.wanted, s.granted, s.pool, s.at) == ("t", 2, 0, "p", 5.0)
    assert s.resources == g.missing and s.reason.startswith("device_fit")


def test_gpu_jobs_do_not_strand_cpu_on_gpu_nodes() -> None:
    gpus = [Device(type="gpu", minor=i, free=100, total=100) for i in range(2)]
    nodes = [node("a-gpu", 4, devices=gpus), node("b-cpu", 4)]
    a = allocate(
        [demand("svc", 4), Demand(workload="job", want=2, requests={"cpu": 2, dev.GPU: 1})],
        nodes,
    )
    assert a.replicas() == {"svc": 4, "job": 2}
    assert a.placement["b-cpu"] == {"svc": 4}


def test_demand_comes_from_the_recommendation() -> None:
    rec = Recommendation(
        workload="ns/Deployment/web", pool="p", desired=12, current=3, ready=3, min_replicas=2,
        max_replicas=10, floor=1, priority=7, weight=2.0, requests={"cpu": 1}, elastic=False,
        reasons=[], inputs=[], newest_input=0.0, policy_generation=1, computed_at=0.0,
    )  # fmt: skip
    d = Demand.of(rec)
    assert (d.want, d.floor, d.tier, d.weight) == (10, 2, 7, 2.0)
    zero = Demand.of(msgspec.structs.replace(rec, desired=0))
    assert (zero.want, zero.floor) == (0, 0)
    assert allocate([rec], [node("n", 4)]).replicas() == {"ns/Deployment/web": 4}


# --- hysteresis -------------------------------------------------------------------------------


def test_previous_allocation_is_kept_within_the_margin_and_not_beyond() -> None:
    nodes = [node("n", 20)]
    first = allocate([demand("a", 10), demand("b", 10)], nodes)
    assert first.replicas() == {"a": 10, "b": 10}
    near = allocate([demand("a", 11), demand("b", 9)], nodes, first)
    assert near.kept_previous and near.replicas() == {"a": 10, "b": 10}
    assert near.grants["a"].rule == "hysteresis"
    far = allocate([demand("a", 14), demand("b", 6)], nodes, first)
    assert not far.kept_previous and far.replicas() == {"a": 14, "b": 6}
    # A bare replicas map works too; it is compared with the new wants.
    assert allocate([demand("a", 10), demand("b", 9)], nodes, {"a": 10, "b": 10}).kept_previous


def test_previous_allocation_is_dropped_when_it_no_longer_fits_or_room_appears() -> None:
    first = allocate([demand("a", 10), demand("b", 10)], [node("n", 12)])
    assert first.replicas() == {"a": 6, "b": 6}
    shrunk = allocate([demand("a", 10), demand("b", 10)], [node("n", 10)], first)
    assert not shrunk.kept_previous and shrunk.replicas() == {"a": 5, "b": 5}
    grown = allocate([demand("a", 10), demand("b", 10)], [node("n", 12), node("m", 4)], first)
    assert not grown.kept_previous and grown.replicas() == {"a": 8, "b": 8}


def test_the_previous_allocation_survives_the_wire() -> None:
    gpus = [Device(type="gpu", minor=i, pcie=str(i // 2), free=100, total=100) for i in range(4)]
    nics = [Device(type="rdma", minor=i, pcie=str(i), free=1, total=1) for i in range(2)]
    nodes = [node("g", 16, devices=gpus + nics), node("c", 2)]
    joint = {"deviceTypes": ["gpu", "rdma"], "requiredScope": "SamePCIe"}
    ds = [
        demand("svc", 3),
        Demand(
            workload="job",
            want=3,
            requests={"cpu": 1, dev.GPU: 2, dev.RDMA: 1},
            joint_allocate=joint,
        ),
    ]
    first = allocate(ds, nodes)
    assert first.replicas() == {"svc": 3, "job": 2}
    wire = msgspec.json.decode(msgspec.json.encode(first), type=Allocation)
    assert wire == first
    again = allocate(ds, nodes, wire)
    assert again.kept_previous and again.devices == first.devices


def test_a_new_floor_above_the_previous_grant_ends_hysteresis() -> None:
    first = allocate([demand("a", 10), demand("b", 10)], [node("n", 20)])
    again = allocate([demand("a", 10, floor=10), demand("b", 10)], [node("n", 20)], first)
    assert again.kept_previous  # 10 already meets the new floor
    tight = allocate([demand("a", 10), demand("b", 10)], [node("n", 12)])
    higher = allocate([demand("a", 10), demand("b", 10, floor=8)], [node("n", 12)], tight)
    assert not higher.kept_previous and higher.replicas() == {"a": 4, "b": 8}


# --- properties -------------------------------------------------------------------------------

SCALARS = ("cpu", "memory")


@st.composite
def scalar_demands(draw: st.DrawFn, max_size: int = 6) -> list[Demand]:
    out = []
    for k in range(draw(st.integers(1, max_size))):
        want = draw(st.integers(0, 8))
        out.append(
            Demand(
                workload=f"w{k}",
                want=want,
                floor=draw(st.integers(0, want)),
                tier=draw(st.sampled_from([0, 0, 1, 2])),
                weight=draw(st.sampled_from([1.0, 2.0, 3.0])),
                elastic=draw(st.booleans()),
                requests={
                    "cpu": draw(st.sampled_from([0.5, 1.0, 2.0, 3.0])),
                    "memory": draw(st.sampled_from([0.5, 1.0, 2.0, 4.0])),
                },
            )
        )
    return out


@st.composite
def scalar_nodes(draw: st.DrawFn, max_size: int = 4) -> list[NodeState]:
    return [
        NodeState(
            node=f"n{i}",
            pool="p",
            allocatable={"cpu": draw(st.integers(0, 16)), "memory": draw(st.integers(0, 16))},
            requested_unmanaged={"cpu": draw(st.sampled_from([0.0, 0.5, 3.0]))},
        )
        for i in range(draw(st.integers(1, max_size)))
    ]


@st.composite
def device_pools(draw: st.DrawFn) -> tuple[list[Demand], list[NodeState]]:
    ds = draw(scalar_demands())
    with_devices = []
    for d in ds:
        extra: dict[str, float] = {}
        kind = draw(st.sampled_from(["none", "none", "gpus", "share", "nics"]))
        if kind == "gpus":
            extra = {
                dev.GPU: float(draw(st.integers(1, 3))),
                dev.RDMA: float(draw(st.integers(0, 1))),
            }
        elif kind == "share":
            extra = {dev.GPU_CORE: float(draw(st.sampled_from([25, 50])))}
        elif kind == "nics":
            extra = {dev.RDMA: 1.0}
        scope = draw(st.sampled_from([None, "SamePCIe", "SameNUMA"]))
        joint = {"deviceTypes": ["gpu", "rdma"], "requiredScope": scope} if scope else None
        with_devices.append(
            msgspec.structs.replace(d, requests={**d.requests, **extra}, joint_allocate=joint)
        )
    nodes = [
        NodeState(
            node=f"n{i}",
            pool="p",
            allocatable={"cpu": draw(st.integers(0, 24)), "memory": draw(st.integers(0, 24))},
            devices=draw(node_devices()),
        )
        for i in range(draw(st.integers(1, 3)))
    ]
    return with_devices, nodes


def _free(n: NodeState) -> dict[str, float]:
    return {r: n.allocatable.get(r, 0.0) - n.requested_unmanaged.get(r, 0.0) for r in SCALARS}


def _check_capacity(ds: list[Demand], nodes: list[NodeState], a: Allocation) -> None:
    by_name = {d.workload: d for d in ds}
    by_node = {n.node: n for n in nodes}
    totals: dict[str, int] = defaultdict(int)
    for name, on in a.placement.items():
        n = by_node[name]
        assert n.ready and n.schedulable
        free = _free(n)
        for r in SCALARS:
            used = sum(k * by_name[w].requests.get(r, 0.0) for w, k in on.items())
            assert used <= free[r] + 1e-9, (name, r, used, free[r])
        gpu_free = {d.minor: d.free if d.healthy else 0.0 for d in n.devices if d.type == "gpu"}
        vfs = {d.minor: int(d.free) for d in n.devices if d.type == "rdma"}
        picks = a.devices.get(name, [])
        for pick in picks:
            req = dev.device_request(
                by_name[pick.workload].requests, by_name[pick.workload].joint_allocate
            )
            _check_valid(n.devices, req, pick.gpus, pick.nics, gpu_free, vfs)
            for m in pick.gpus:
                gpu_free[m] -= req.gpu_share if req.gpu_share > 0 else 100.0
            for m in pick.nics:
                vfs[m] -= 1
        for w, k in on.items():
            totals[w] += k
            if not dev.device_request(by_name[w].requests).empty:
                assert sum(1 for p in picks if p.workload == w) == k
    for w, g in a.grants.items():
        assert totals[w] == g.replicas <= g.wanted == by_name[w].want
        assert (g.replicas < g.wanted) == bool(g.rule not in ("unchanged", "hysteresis"))


@settings(max_examples=300, deadline=None)
@given(device_pools())
def test_capacity_is_never_exceeded_on_any_node(pool: tuple[list[Demand], list[NodeState]]) -> None:
    ds, nodes = pool
    _check_capacity(ds, nodes, allocate(ds, nodes))


@settings(max_examples=300, deadline=None)
@given(scalar_demands(), scalar_nodes())
def test_capacity_is_never_exceeded_without_devices(
    ds: list[Demand], nodes: list[NodeState]
) -> None:
    _check_capacity(ds, nodes, allocate(ds, nodes))


def _fits(req: dict[str, float], free: dict[str, float]) -> bool:
    return all(req.get(r, 0.0) <= free[r] + 1e-9 for r in SCALARS)


def _one_node_left(ds: list[Demand], n: NodeState, a: Allocation) -> dict[str, float]:
    free = _free(n)
    for d in ds:
        for r in SCALARS:
            free[r] -= a.grants[d.workload].replicas * d.requests.get(r, 0.0)
    return free


def _lower(a: Demand, b: Demand) -> bool:
    """b is in a class below a's: a lower tier, or the same tier and b elastic, a not."""
    return (-a.tier, a.elastic) < (-b.tier, b.elastic)


@settings(max_examples=400, deadline=None)
@given(scalar_demands(), scalar_nodes(max_size=1))
def test_one_node_floors_and_tiers(ds: list[Demand], nodes: list[NodeState]) -> None:
    # On one node, packing is a sum, so "fits" is exact and every rule can be checked as stated.
    [n] = nodes
    a = allocate(ds, nodes)
    left = _one_node_left(ds, n, a)
    free = _free(n)
    floors_fit = all(
        sum(d.floor * d.requests[r] for d in ds) <= max(0.0, free[r]) + 1e-9 for r in SCALARS
    )
    got = a.replicas()
    if floors_fit:
        assert all(got[d.workload] >= d.floor for d in ds)
    for h in ds:
        if got[h.workload] >= h.want:
            continue
        # Nothing more of h fits in what is left, even with one replica of any lower class's
        # above-floor share (or, while h is below its floor, any replica of a lower class) given up.
        assert not _fits(h.requests, left)
        for low in ds:
            if not _lower(h, low):
                continue
            give_up = got[low.workload] > (0 if got[h.workload] < h.floor else low.floor)
            if give_up:
                room = {r: left[r] + low.requests[r] for r in SCALARS}
                assert not _fits(h.requests, room), (h, low)


@settings(max_examples=300, deadline=None)
@given(scalar_demands(), st.integers(1, 5), st.integers(1, 12), st.integers(1, 12))
def test_alike_replicas_on_many_nodes_floors_and_tiers(
    ds: list[Demand], count: int, cpu: int, memory: int
) -> None:
    # With one replica shape, n replicas fit iff n ≤ Σ per-node slots: exact again.
    shaped = [msgspec.structs.replace(d, requests={"cpu": 1.5, "memory": 1.0}) for d in ds]
    nodes = [node(f"n{i}", cpu + i % 2, memory) for i in range(count)]
    slots = sum(
        min(math.floor(_free(n)["cpu"] / 1.5), math.floor(_free(n)["memory"])) for n in nodes
    )
    got = allocate(shaped, nodes).replicas()
    assert sum(got.values()) == min(slots, sum(d.want for d in shaped))
    if sum(d.floor for d in shaped) <= slots:
        assert all(got[d.workload] >= d.floor for d in shaped)
    for h in shaped:
        if got[h.workload] < h.want:
            for low in shaped:
                if _lower(h, low):
                    assert got[low.workload] <= (0 if got[h.workload] < h.floor else low.floor)


def _noisy(d: Demand, e: float) -> Demand:
    return msgspec.structs.replace(d, want=round(d.want * (1 + e)))


@settings(max_examples=200, deadline=None)
@given(device_pools(), st.lists(st.floats(-0.05, 0.05), min_size=6, max_size=6))
def test_five_percent_noise_changes_nothing(
    pool: tuple[list[Demand], list[NodeState]], noise: list[float]
) -> None:
    ds, nodes = pool
    first = allocate(ds, nodes)
    again = allocate([_noisy(d, e) for d, e in zip(ds, noise, strict=False)], nodes, first)
    assert again.kept_previous
    assert again.replicas() == first.replicas()
    assert again.placement == first.placement


@settings(max_examples=100, deadline=None)
@given(device_pools(), st.randoms(use_true_random=False))
def test_same_input_same_output(
    pool: tuple[list[Demand], list[NodeState]], rnd: random.Random
) -> None:
    ds, nodes = pool
    first = allocate(ds, nodes)
    assert allocate(ds, nodes) == first
    ds2, nodes2 = list(ds), list(nodes)
    rnd.shuffle(ds2)
    rnd.shuffle(nodes2)
    assert allocate(ds2, nodes2) == first
    assert allocate(ds, nodes, first) == allocate(ds, nodes, first)
