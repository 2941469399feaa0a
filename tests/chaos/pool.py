"""The fault-free reference with the pool in it: stage 2's allocation over every workload.

`load.reference` replays each workload alone, which is right while the pool holds every
workload's demand (four nodes: the web services' peak and the job's maximum fit). A fault that
takes capacity away (`node-unhealthy`) makes stage 2 cut by priority, and a reference of each
workload alone cannot say whether the cut was the right one. `PoolReference` answers that:
at each step of the base reference it feeds every workload's reference demand, as the
Recommendation stage 1 would publish for it (`policy.recommend`, `Demand.of` after `bound`:
the decider's own mapping), and the pool's nodes as the cluster table has them, with the
fault's nodes not ready while it lasts, to the same `policy.allocate` the decider's stage 2
runs (with the previous allocation and the decider's margin, 0). The elastic job's restart
damping is left out: the reference is where a fault-free stage 2 would go at once, and the
damping only delays the job (its convergence time shows it).

Pure: the tables are read by the harness (`PoolInputs.read`) and handed in.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection
from dataclasses import dataclass

import msgspec

from governor import events
from governor.bus import read_table
from governor.policy.allocate import Allocation, Demand, allocate
from governor.policy.recommend import bound, recommend
from governor.policy.types import ScaleResult
from governor.spec import ScalingPolicy
from tests.chaos.checks import Reference

MARGIN = 0.0  # the decider's allocation_margin (DeciderSettings), as the chaos run leaves it


@dataclass(frozen=True)
class PoolInputs:
    """What stage 2 allocates over, off the decider's tables once the run is up: each
    workload's policy and WorkloadState (its requests), and the pool's nodes."""

    policies: dict[str, ScalingPolicy]  # by workload id
    states: dict[str, events.WorkloadState]
    nodes: tuple[events.NodeState, ...]

    @classmethod
    async def read(cls, bootstrap: str) -> PoolInputs:
        recs = await read_table(bootstrap, events.POLICIES)
        policies = {r.policy.workload: r.policy for r in recs.values() if r is not None}
        states = await read_table(bootstrap, events.WORKLOADS)
        nodes = await read_table(bootstrap, events.CLUSTER)
        return cls(policies, dict(states), tuple(n for _, n in sorted(nodes.items())))

    def demand(self, workload: str, want: int, at: float) -> Demand | None:
        """The Demand stage 2 makes of a Recommendation desiring `want` (None: not known)."""
        policy, state = self.policies.get(workload), self.states.get(workload)
        if policy is None or state is None:
            return None
        result = ScaleResult(desired=want, current=state.spec_replicas, bound_by="metric",
                             reasons=(), inputs=(), newest_input=at)  # fmt: skip
        rec = recommend(policy, state, result, at)
        return Demand.of(msgspec.structs.replace(rec, desired=bound(rec)[0]))


def pool_grants(
    inputs: PoolInputs,
    wants: dict[str, int],
    out: Collection[str],
    previous: dict[str, Allocation],
    at: float,
) -> dict[str, Allocation]:
    """One step: each pool's allocation of its workloads' `wants` (`previous`: the last step's,
    by pool) over its nodes, the `out` ones not ready."""
    demands = [d for w, n in sorted(wants.items()) if (d := inputs.demand(w, n, at)) is not None]
    by_pool: dict[str, list[Demand]] = {}
    for d in demands:
        by_pool.setdefault(inputs.policies[d.workload].spec.pool, []).append(d)
    allocations = {}
    for pool, mine in sorted(by_pool.items()):
        nodes = [
            msgspec.structs.replace(n, ready=False) if n.node in out else n
            for n in inputs.nodes
            if n.pool == pool
        ]
        if nodes:  # a pool without inventory is bounds-only: its workloads keep `base`
            allocations[pool] = allocate(mine, nodes, previous.get(pool), margin=MARGIN)
    return allocations


@dataclass(frozen=True)
class PoolReference:
    """`base` outside [`start`, `end`] (wall); inside, on `base`'s own steps (`stamps`, wall),
    each workload's grant of the pool's allocation of every workload's `base` demand, with
    `out` nodes not ready from `start` to `heal`."""

    base: Reference
    stamps: list[float]
    grants: list[dict[str, int]]

    def __call__(self, workload: str, wall: float) -> int:
        i = bisect.bisect_right(self.stamps, wall) - 1
        if i < 0 or wall > self.stamps[-1]:
            return self.base(workload, wall)
        return self.grants[i].get(workload, self.base(workload, wall))


def pool_reference(
    base: Reference,
    inputs: PoolInputs,
    workloads: Collection[str],
    out: Collection[str],
    window: tuple[float, float, float],
    step: float,
) -> PoolReference:
    """The pool's reference over `window` = (start, heal, end) wall seconds, every `step`."""
    start, heal, end = window
    stamps: list[float] = []
    grants: list[dict[str, int]] = []
    previous: dict[str, Allocation] = {}
    t = start
    while t <= end:
        wants = {w: base(w, t) for w in workloads}
        previous = pool_grants(inputs, wants, out if t <= heal else (), previous, t)
        stamps.append(t)
        grants.append({w: n for a in previous.values() for w, n in a.replicas().items()})
        t += step
    return PoolReference(base, stamps, grants)
