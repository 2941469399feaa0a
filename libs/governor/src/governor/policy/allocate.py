"""Capacity-aware allocation of one pool: who gets how many replicas when the nodes are full.

Inventory. A node offers its allocatable minus what unmanaged pods request; not-ready and
unschedulable nodes offer nothing. Managed workloads' running replicas are not subtracted: the
allocation re-places every managed replica from scratch, so `requested_managed` is ignored and
each Device's `free` must likewise be net of unmanaged pods only (the collector's contract).
Device resources (`devices.DEVICE_RESOURCES`) are satisfied by Device objects only; every other
requested resource must fit the node's scalar free amount. A replica lives on one node, so
capacity is per node: every granted replica is placed on a concrete node and the answer is real.

Demand. want = min(desired, max_replicas); floor = min(max(floor, min_replicas), want) — the
floor guarantees what the workload asks for, it never inflates it (scale to zero stays zero).

Order. Workloads fall into classes: tier (Recommendation.priority, higher first, as a
PriorityClass value) and, inside a tier, services before elastic training — elastic replicas
above the floor are the first to go when a tier shrinks (Volcano preempts above-minAvailable
pods first, and an elastic job tolerates it by design). Then:

1. floors: when they all fit (packed first-fit-decreasing, every class at once) they are all
   placed; when they do not, class by class from the top, so the lowest class loses them first
   (elastic before services inside a tier), and inside a class weighted DRF decides (the largest
   weighted share loses first);
2. above the floor, class by class from the top: a class only gets what the classes above it
   left, so a higher tier never loses above-floor replicas to a lower tier's above-floor demand.

Inside a class: weighted DRF by progressive filling — one replica at a time to the workload with
the lowest weighted dominant share (dominant share = max over cpu, memory, … , GPUs and NIC VFs
of allocated / pool capacity; divided by weight) that still wants more and whose next replica
fits on some node; ties go to the smaller workload id. On small pools this equals an exhaustive
search for the best allocation in that order (tests/unit/test_policy_allocate_bruteforce.py says
what "best" means and where first-fit packing may fall short of it). Placement is first-fit over
nodes by name (device-less nodes first for replicas that need no devices, so they do not strand
GPUs); a workload whose replica fits nowhere is done: capacity only shrinks as the fill goes on.

Hysteresis. With the previous allocation given, it is kept as a whole when (a) the same
workloads are present, (b) each want is within `margin` (default 10 %) of the previous want —
of the previous grant when only a replicas map is given —, (c) each previous grant is at most
max_replicas and at least the new floor, unless that floor did not rise (a floor the pool could
not meet before may stay unmet), (d) the previous grants still fit the nodes (the previous
placement as it was, else a first-fit-decreasing packing) and every quota and queue capability,
and (e) no resource's pool capacity grew since, and no quota or queue was lifted or grew (only
known from a previous `Allocation`: new room is handed out at once).

Quotas and queues (`constraints`, built by `policy.quotas.constraints`). A replica must also fit
every namespace ResourceQuota and Volcano queue capability that covers its workload (hard, like
a node: a full one stops the workload), and may not take what another queue's guarantee keeps
for that queue's own demand. Replicas a non-reclaimable queue held in the previous allocation
count as floors; above the floors, inside a class, queues below their deserved share fill first.
The whole order, as one table: docs/scalingpolicy.md. With no constraints, nothing changes.
A grant a quota or queue stopped has rule `capacity`, `limit` naming it, and a detail such as
`quota: shop/compute-quota requests.cpu 38/40 -> 6`.

Each grant names the rule that bound it: `unchanged` (got what it wanted), `hysteresis` (the
previous grant was kept), `device_fit` (no node can place the devices of one more replica), else
the first that holds of `priority` (a higher class holds replicas of the phase the workload was
stopped in), `fair_share` (its own class's peers do), `floor` (stopped above its floor while other
workloads' floors hold room), `capacity`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from governor.events import NodeState, Recommendation, Rule, Shortfall
from governor.policy.fill import (
    GPU_DIM,
    RDMA_DIM,
    Census,
    Pool,
    Work,
    fill,
    fill_limited,
    grant,
    prepare,
)
from governor.policy.grants import DEFAULT_MARGIN, TOL, Allocation, Demand, DevicePick, Grant
from governor.policy.quotas import Constraints, Ledger

__all__ = [
    "DEFAULT_MARGIN",
    "GPU_DIM",
    "RDMA_DIM",
    "Allocation",
    "Demand",
    "DevicePick",
    "Grant",
    "allocate",
    "shortfalls",
]


def allocate(
    demands: Iterable[Demand | Recommendation],
    nodes: Iterable[NodeState],
    previous: Allocation | Mapping[str, int] | None = None,
    *,
    margin: float = DEFAULT_MARGIN,
    constraints: Constraints | None = None,
) -> Allocation:
    """Replicas per workload of one pool, each with the rule that bound it (pure).

    `constraints`: the namespace quotas and Volcano queues over the pool (`policy.quotas`)."""
    ws, pool, resources = prepare(demands, nodes)
    ledger = _ledger(ws, pool, constraints)
    if previous is not None:
        kept = _keep(ws, pool, previous, margin, ledger)
        if kept is not None:
            return kept
        pool.reset()
        if ledger is not None:
            ledger.reset()
    if ledger is not None:
        return _allocate_limited(ws, pool, resources, ledger, previous)
    classes = sorted({w.cls for w in ws})
    members = {c: [w for w in ws if w.cls == c] for c in classes}
    if _pack(pool, ws, {w.d.workload: w.floor for w in ws}):
        for w in ws:
            w.n = w.floor
    else:
        pool.reset()
        for c in classes:
            fill(pool, members[c], "floor", "floor")
    for c in classes:
        fill(pool, members[c], "want", "above")
    census = Census(ws, pool)
    grants = {w.d.workload: grant(w, census, resources) for w in ws}
    return _result(grants, pool, kept=False)


def _ledger(ws: list[Work], pool: Pool, constraints: Constraints | None) -> Ledger | None:
    if constraints is None or constraints.empty:
        return None
    return Ledger(
        constraints,
        {w.d.workload: w.want for w in ws},
        {w.d.workload: w.d.requests for w in ws},
        pool.capacity,
    )


def _allocate_limited(
    ws: list[Work],
    pool: Pool,
    resources: list[str],
    ledger: Ledger,
    previous: Allocation | Mapping[str, int] | None,
) -> Allocation:
    """The same order as without limits, each replica also passing the ledger; what a
    non-reclaimable queue held before counts as a floor."""
    before = previous.replicas() if isinstance(previous, Allocation) else dict(previous or {})
    held = ledger.protected(before, {w.d.workload: w.want for w in ws})
    floors = {w.d.workload: max(w.floor, held.get(w.d.workload, 0)) for w in ws}
    classes = sorted({w.cls for w in ws})
    members = {c: [w for w in ws if w.cls == c] for c in classes}
    if _pack(pool, ws, floors, ledger):
        for w in ws:
            w.n = floors[w.d.workload]
    else:
        pool.reset()
        ledger.reset()
        for c in classes:
            fill_limited(pool, members[c], "floor", "floor", ledger, floors)
    for c in classes:
        fill_limited(pool, members[c], "want", "above", ledger, floors)
    census = Census(ws, pool)
    grants = {w.d.workload: _limited_grant(w, census, resources, ledger) for w in ws}
    return _result(grants, pool, kept=False, ledger=ledger)


def _limited_grant(w: Work, census: Census, resources: list[str], ledger: Ledger) -> Grant:
    """The grant, naming the quota or queue that stopped it when one did."""
    g = grant(w, census, resources)
    if g.short <= 0:
        return g
    bound = ledger.binding(w.d.workload)
    if bound is None:
        return g
    name, text = bound
    missing = {
        r: g.short * a
        for lim in ledger.limits
        if lim.name == name
        for r, a in lim.cost.get(w.d.workload, {}).items()
    }
    return msgspec.structs.replace(
        g,
        rule="capacity",
        detail=f"{text} -> {w.n}; {w.n}/{w.want} replicas (floor {w.floor}, tier {w.d.tier})",
        missing=missing or g.missing,
        limit=name,
    )


def _result(
    grants: dict[str, Grant], pool: Pool, *, kept: bool, ledger: Ledger | None = None
) -> Allocation:
    return Allocation(
        grants=grants,
        placement={pool.names[i]: p for i, p in enumerate(pool.placed) if p},
        devices={pool.names[i]: p for i, p in enumerate(pool.picks) if p},
        capacity=dict(pool.capacity),
        kept_previous=kept,
        limits=ledger.room() if ledger is not None else {},
    )


# --- hysteresis -------------------------------------------------------------------------------


def _within(new: int, ref: int, margin: float) -> bool:
    return abs(new - ref) <= margin * ref + TOL


def _keep(
    ws: list[Work],
    pool: Pool,
    previous: Allocation | Mapping[str, int],
    margin: float,
    ledger: Ledger | None = None,
) -> Allocation | None:
    """The previous allocation, re-placed on today's nodes, if nothing moved past the margin."""
    if isinstance(previous, Allocation):
        grants = previous.replicas()
        ref = {w: g.wanted for w, g in previous.grants.items()}
        # A floor the previous allocation could not meet may stay unmet, unless it rose.
        floors = {w: g.floor for w, g in previous.grants.items()}
    else:
        grants = dict(previous)
        ref = grants
        floors = {}
    if set(grants) != {w.d.workload for w in ws}:
        return None
    for w in ws:
        name = w.d.workload
        g = grants[name]
        ceiling = w.d.max_replicas if w.d.max_replicas is not None else g
        floor = w.floor if w.floor > floors.get(name, w.floor) else min(w.floor, g)
        if not (_within(w.want, ref[name], margin) and floor <= g <= ceiling):
            return None
    by_name = {w.d.workload: w for w in ws}
    if not _packed(ws, pool, grants, previous):
        return None
    if ledger is not None and not ledger.fits(grants):
        return None
    if isinstance(previous, Allocation) and _limits_loosened(previous.limits, ledger):
        return None
    if isinstance(previous, Allocation):
        for r, c in pool.capacity.items():
            if c > previous.capacity.get(r, 0.0) + TOL * max(1.0, c):
                return None
    out: dict[str, Grant] = {}
    for name, g in grants.items():
        w = by_name[name]
        before = previous.grants[name] if isinstance(previous, Allocation) else None
        rule: Rule = "unchanged" if g == w.want else "hysteresis"
        out[name] = Grant(
            workload=name,
            replicas=g,
            wanted=w.want,
            floor=w.floor,
            rule=rule,
            detail=f"kept {g} (wants {w.want}, within {margin:.0%} of {ref[name]})"
            if rule == "hysteresis"
            else "",
            missing=dict(before.missing) if before is not None and g < w.want else {},
            limit=before.limit if before is not None and g < w.want else "",
        )
    return _result(out, pool, kept=True, ledger=ledger)


def _limits_loosened(before: Mapping[str, Mapping[str, float]], ledger: Ledger | None) -> bool:
    """A quota or queue capability was lifted or gives more room than before: like new nodes,
    new room is handed out at once."""
    now = ledger.room() if ledger is not None else {}
    for name, room in before.items():
        if name not in now:
            return True
        for r, v in room.items():
            if now[name].get(r, float("inf")) > v + TOL * max(1.0, abs(v)):
                return True
    return False


def _pack(
    pool: Pool, ws: list[Work], counts: Mapping[str, int], ledger: Ledger | None = None
) -> bool:
    """First-fit-decreasing of `counts` replicas onto the pool (dominant share decreasing)."""
    for w in sorted(ws, key=lambda w: (-w.size, w.d.workload)):
        for _ in range(counts.get(w.d.workload, 0)):
            if ledger is not None and ledger.refuses(w.d.workload) is not None:
                return False
            if not pool.place(w):
                return False
            if ledger is not None:
                ledger.take(w.d.workload)
    return True


def _packed(
    ws: list[Work],
    pool: Pool,
    grants: Mapping[str, int],
    previous: Allocation | Mapping[str, int],
) -> bool:
    """Places `grants` on the empty pool: the previous placement if it still fits, else FFD."""
    by_name = {w.d.workload: w for w in ws}
    if isinstance(previous, Allocation):
        index = {name: i for i, name in enumerate(pool.names)}
        ok = set(previous.placement) <= set(index)
        for node, on in sorted(previous.placement.items()) if ok else ():
            # Device replicas replay in their original order so the same choices recur.
            remaining = dict(on)
            order: list[str] = []
            for pick in previous.devices.get(node, []):
                if remaining.get(pick.workload, 0) > 0:
                    order.append(pick.workload)
                    remaining[pick.workload] -= 1
            order += [n for n, k in sorted(remaining.items()) for _ in range(k)]
            i = index[node]
            if any(n not in by_name or not pool.place_on(i, by_name[n]) for n in order):
                ok = False
                break
        placed: dict[str, int] = {}
        for on_node in pool.placed:
            for n, k in on_node.items():
                placed[n] = placed.get(n, 0) + k
        if ok and all(placed.get(n, 0) == k for n, k in grants.items()):
            return True
        pool.reset()
    return _pack(pool, ws, grants)


def shortfalls(alloc: Allocation, pool: str, at: float) -> list[Shortfall]:
    """One Shortfall per workload granted less than it wanted (topic governor.shortfalls)."""
    return [
        Shortfall(
            workload=g.workload,
            pool=pool,
            wanted=g.wanted,
            granted=g.replicas,
            resources=dict(g.missing),
            reason=f"{g.rule}: {g.detail}" if g.detail else g.rule,
            at=at,
            limit=g.limit,
        )
        for g in sorted(alloc.grants.values(), key=lambda g: g.workload)
        if g.short > 0
    ]
