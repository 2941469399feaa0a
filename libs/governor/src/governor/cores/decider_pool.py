"""Stage 2 of a pool with inventory: the allocation over its members' latest recommendations
(`policy.rebalance.plan`), the decisions it allows and the shortfalls that changed."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from governor.cores.decider_memory import POOL_PREFIX, Outputs, Stage1View
from governor.events import DeciderCheckpoint
from governor.policy.quotas import constraints
from governor.policy.rebalance import Member, plan, shortfall_updates

if TYPE_CHECKING:
    from governor.cores.decider import DeciderCore


def decide_pool(core: DeciderCore, pool: str, now: float) -> Outputs:
    """`DeciderCore.decide_pool`: what the pool's allocation at `now` asks to publish (its
    checkpoint first, then each member's decision checkpoint, decisions and shortfalls)."""
    nodes = [n for _, n in sorted(core.nodes.items()) if n.pool == pool]
    if not nodes:
        return Outputs(note=f"pool {pool}: no inventory")
    if now < core.settled_at:
        return Outputs(note=f"pool {pool}: members still recommending after an assignment")
    recs = core.recommendations.get(pool, {})
    members: list[Member] = []
    stage1: dict[str, Stage1View] = {}
    for workload, rec in sorted(recs.items()):
        s1 = core.stage2_view(workload, rec, now)
        if s1 is None or s1.policy.spec.pool != pool:
            continue
        stage1[workload] = s1
        members.append(
            Member(
                rec=s1.rec,  # as stage 2 judged it (`held_in_transit`)
                current=s1.current,
                elastic=s1.policy.spec.elastic,
                state=s1.mem.elastic,
                restarts=s1.observed.restarts,
                started_at=s1.observed.started_at,
            )
        )
    pm = core.pool_memory(pool)
    out = Outputs()
    if not members:
        out.note = f"pool {pool}: no recommendations yet"
        return out
    limits = constraints(
        core.quotas.values(),
        core.queues.values(),
        [m.rec.workload for m in members],
        {w: s.spec_replicas for w, s in core.workloads.items()},
    )
    p = plan(
        members,
        nodes,
        pm.allocation,
        pool=pool,
        now=now,
        margin=core.allocation_margin,
        constraints=limits,
    )
    if p.allocation != pm.allocation:
        pm.allocation = p.allocation
        pm.seq += 1
        out.checkpoints.append(
            DeciderCheckpoint(
                workload=POOL_PREFIX + pool,  # `decider.pool_key`
                seq=pm.seq,
                allocation=msgspec.msgpack.encode(p.allocation),
                updated_at=now,
            )
        )
    notes = []
    for workload, target in p.targets.items():
        s1 = stage1[workload]
        if target.state is not None:
            s1.mem.elastic = target.state
        one = Outputs()
        d = core.decision(s1, target.replicas, target.reasons, now, one)
        if one.checkpoint is not None:
            out.checkpoints.append(one.checkpoint)
        if d is not None:
            out.decisions.append(d)
        elif one.note and one.note != "no change":
            notes.append(f"{workload}: {one.note}")
    out.shortfalls, pm.shortfalls = shortfall_updates(
        pm.shortfalls, p.shortfalls, p.targets, pool=pool, now=now
    )
    out.note = "; ".join(notes)
    return out
