"""Stage 2 of the decider for a pool with a known inventory (pure): recommendations in, targets out.

`plan` turns the pool's latest recommendations (each with the replicas the workload runs or was
last asked for) and the pool's nodes into a replica target per workload, with reasons, and the
capacity shortfalls:

1. each recommendation within its policy's bounds (`recommend.bound`) becomes a `Demand`;
2. `allocate` over the pool's nodes, under the namespace quotas and Volcano queues its
   workloads fall under (`constraints`), with the previous allocation handed back (hysteresis,
   stable placement). Failed nodes, GPUs and NICs are simply absent from the inventory (not
   ready, not schedulable, unhealthy devices), so replicas that counted on them are re-placed or
   lost, and the lost ones come from the lowest tier first (a higher tier takes from lower tiers);
3. elastic training jobs: each grant that differs from what the job runs goes through
   `elastic.judge`. A held resize pins that job's demand at its current replicas (floor
   included) and the allocation runs again, so the room it does not take goes to others this
   very cycle; this repeats until no further job is held (the held set only grows, so it ends).
   Shrinks the pool forces are never held; a pinned job the pool cannot even keep at what it runs
   is shrunk to what fits (forced).
4. a shortfall per workload the pool could not give what it wanted. A job held by damping is not
   short on that account: only what the allocation without the hold could not give counts.

`shortfall_updates` keeps the shortfalls topic quiet: a workload's shortfall is published when its
(wanted, granted) pair changes, and once more, "resolved", when it is no longer short.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from governor.events import NodeState, Reason, Recommendation, Shortfall
from governor.policy import elastic as el
from governor.policy.allocate import DEFAULT_MARGIN, Allocation, Demand, Grant, allocate
from governor.policy.quotas import Constraints
from governor.policy.recommend import bound
from governor.spec import ElasticSpec

RESOLVED = "resolved"


class Member(msgspec.Struct, frozen=True, kw_only=True):
    """What stage 2 knows of one workload of the pool."""

    rec: Recommendation
    current: int  # the replicas it runs, or was last asked for while that is in flight
    elastic: ElasticSpec | None = None
    state: el.ElasticState = msgspec.field(default_factory=el.ElasticState)
    restarts: int = 0  # WorkloadState.restarts
    started_at: float | None = None  # WorkloadState.started_at


class Target(msgspec.Struct, frozen=True, kw_only=True):
    workload: str
    replicas: int
    wanted: int  # the recommendation within its bounds
    reasons: list[Reason]
    verdict: el.Verdict | None = None  # elastic jobs: what the damping said
    state: el.ElasticState | None = None  # elastic jobs: the damping's state to keep


class PoolPlan(msgspec.Struct, frozen=True, kw_only=True):
    allocation: Allocation  # hand back as `previous` next time
    targets: dict[str, Target]
    shortfalls: list[Shortfall]  # every workload short right now (not de-duplicated)
    rounds: int = 1  # allocations run (1 + rounds caused by held resizes)


def _demand(m: Member, want: int, held: el.Verdict | None) -> Demand:
    d = Demand.of(msgspec.structs.replace(m.rec, desired=want))
    if held is None:
        return d
    pinned = held.replicas
    return msgspec.structs.replace(
        d, want=pinned, floor=min(d.floor, pinned), max_replicas=max(pinned, m.rec.max_replicas)
    )


def _grant_reason(g: Grant) -> Reason | None:
    if g.rule == "unchanged":
        return None
    return Reason(rule=g.rule, detail=g.detail, value=float(g.replicas), limit=g.limit)


def _judge(m: Member, grant: int, want: int, now: float) -> tuple[el.Verdict, el.ElasticState]:
    assert m.elastic is not None
    return el.judge(
        m.elastic,
        m.state,
        current=m.current,
        target=grant,
        want=want,
        floor=min(max(m.rec.floor, m.rec.min_replicas), want),
        now=now,
        restarts=m.restarts,
        started_at=m.started_at,
    )


def _allocate_with_holds(
    ms: list[Member],
    nodes: list[NodeState],
    previous: Allocation | None,
    bounded: dict[str, tuple[int, list[Reason]]],
    now: float,
    margin: float,
    constraints: Constraints | None,
) -> tuple[Allocation, Allocation, dict[str, el.Verdict], int]:
    """Allocate, pin the elastic jobs whose resize does not pay for its restart, and again until
    no new job holds: (last allocation, first allocation, holds, rounds)."""
    held: dict[str, el.Verdict] = {}
    first: Allocation | None = None
    rounds = 0
    while True:
        demands = [_demand(m, bounded[m.rec.workload][0], held.get(m.rec.workload)) for m in ms]
        alloc = allocate(demands, nodes, previous, margin=margin, constraints=constraints)
        rounds += 1
        if first is None:
            first = alloc
        new = {}
        for m in ms:
            w = m.rec.workload
            if m.elastic is None or w in held:
                continue
            v, _ = _judge(m, alloc.grants[w].replicas, bounded[w][0], now)
            if v.kind == "hold":
                new[w] = v
        if not new:
            return alloc, first, held, rounds
        held.update(new)


def plan(
    members: Iterable[Member],
    nodes: Iterable[NodeState],
    previous: Allocation | None = None,
    *,
    pool: str,
    now: float,
    margin: float = DEFAULT_MARGIN,
    constraints: Constraints | None = None,
) -> PoolPlan:
    """Replica targets for a pool's workloads over its inventory (pure); `constraints`: the
    namespace quotas and Volcano queues the pool's workloads fall under (`policy.quotas`)."""
    ms = sorted(members, key=lambda m: m.rec.workload)
    node_list = list(nodes)
    bounded = {m.rec.workload: bound(m.rec) for m in ms}
    alloc, first, held, rounds = _allocate_with_holds(
        ms, node_list, previous, bounded, now, margin, constraints
    )
    targets: dict[str, Target] = {}
    short: list[Shortfall] = []
    for m in ms:
        w = m.rec.workload
        want, extra = bounded[w]
        g = alloc.grants[w]
        reasons = [*m.rec.reasons, *extra]
        verdict: el.Verdict | None = None
        state: el.ElasticState | None = None
        replicas = g.replicas
        capacity = g
        if m.elastic is not None:
            if w in held and g.replicas == held[w].replicas:
                # Judged on what the pool could give it without the hold.
                verdict, state = _judge(m, first.grants[w].replicas, want, now)
                if verdict.kind != "hold":
                    verdict = held[w]
                capacity = first.grants[w]
            elif w in held and g.replicas < held[w].replicas:
                # Even pinned, the pool cannot keep what the job runs: a forced shrink.
                verdict = el.Verdict(kind="apply", replicas=g.replicas, forced=True)
                _, state = _judge(m, g.replicas, g.replicas + 1, now)
                capacity = first.grants[w]
            else:
                verdict, state = _judge(m, g.replicas, want, now)
            replicas = verdict.replicas
            if verdict.reason is not None:
                reasons.append(verdict.reason)
        why = _grant_reason(capacity)
        if why is not None:
            reasons.append(why)
        targets[w] = Target(
            workload=w,
            replicas=replicas,
            wanted=want,
            reasons=reasons,
            verdict=verdict,
            state=state,
        )
        if capacity.short > 0 and replicas < want:
            short.append(
                Shortfall(
                    workload=w,
                    pool=pool,
                    wanted=want,
                    granted=replicas,
                    resources=dict(capacity.missing),
                    reason=f"{capacity.rule}: {capacity.detail}"
                    if capacity.detail
                    else capacity.rule,
                    at=now,
                    limit=capacity.limit,
                )
            )
    return PoolPlan(allocation=alloc, targets=targets, shortfalls=short, rounds=rounds)


ShortKey = tuple[int, int]  # (wanted, granted)


def shortfall_updates(
    last: Mapping[str, ShortKey],
    current: Iterable[Shortfall],
    targets: Mapping[str, Target],
    *,
    pool: str,
    now: float,
) -> tuple[list[Shortfall], dict[str, ShortKey]]:
    """The shortfalls to publish now and the new memory of what was published (pure).

    A workload's shortfall goes out when its (wanted, granted) changed since the last one published;
    a workload that was short and is no longer gets one record with reason "resolved"
    (granted = wanted), so a subscriber (a cluster autoscaler) can stop asking for it.
    """
    out: list[Shortfall] = []
    memory: dict[str, ShortKey] = {}
    for s in sorted(current, key=lambda s: s.workload):
        key = (s.wanted, s.granted)
        memory[s.workload] = key
        if last.get(s.workload) != key:
            out.append(s)
    for w in sorted(set(last) - set(memory)):
        t = targets.get(w)
        n = t.replicas if t is not None else 0
        out.append(
            Shortfall(
                workload=w, pool=pool, wanted=n, granted=n, resources={}, reason=RESOLVED, at=now
            )
        )
    return out, memory
