"""Which workloads and pools a decider tick evaluates: the one rule of `DeciderCore.tick`, which
the service's ticker and the scenario runner both call, so they cannot tick differently."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple

from governor.ownership import Ownership

if TYPE_CHECKING:
    from governor.cores.decider import DeciderCore


def due_by_time(
    core: DeciderCore, recent: float = math.inf, evaluated: Mapping[str, float] | None = None
) -> list[str]:
    """Every workload with load, and every member of a pool with inventory (stage 2 needs a
    pool's whole set), that `core` owns, in order; except those evaluated on their load since
    `recent` (`evaluated`: workload -> when), which time still reaches on the next tick (at least
    every two, for staleness, fallback, cooldowns and panic exit), and those of a load partition
    still behind (`DeciderCore.behind`: its newer windows are on their way, and the catch-up
    evaluates them)."""
    pools = set(core.inventory_pools())
    members = {w for w, p in core.policies.items() if p.spec.pool in pools}
    owns, late = core.ownership.owns_workload, core.behind.owns_workload
    done = evaluated or {}
    return [
        w
        for w in sorted(set(core.windows) | members)
        if done.get(w, -math.inf) < recent and owns(w) and not late(w)
    ]


# How many ticks a workload its load evaluated is not due by time. The aggregator sends a
# series once per panic hop (2 s) at a sample a second (`publish_interval_ms`), so its load
# comes about two 1 s ticks apart: a skip of two would let about every other tick evaluate it
# once more just before its load does; one tick would at 1 s apart (the 500 ms throttle's).
LOAD_SKIP_TICKS = 3


def due_now(core: DeciderCore, now: float) -> list[str]:
    """Stage 1 by time at `now`: `due_by_time`, less the workloads their load evaluated within
    the last `LOAD_SKIP_TICKS` ticks (`DeciderCore.evaluated`); time still moves for each at
    least every four ticks (a tick does not mark a workload)."""
    return due_by_time(core, now - LOAD_SKIP_TICKS * core.tick_seconds, core.evaluated)


def due_pools(core: DeciderCore) -> list[str]:
    """Stage 2 by time: every owned pool with inventory (a node, GPU or NIC failure changes its
    allocation), except those whose recommendations partition is behind (`DeciderCore.behind`)."""
    owned, late = core.ownership.owns_pool, core.behind.owns_pool
    return [pool for pool in core.inventory_pools() if owned(pool) and not late(pool)]


class PartitionLag(NamedTuple):
    """Records between the next one to handle and the end, per owned partition of the load and
    the recommendations topics (what the shell reads off its consumer)."""

    load: Mapping[int, int]
    recommendations: Mapping[int, int]


def behind(ownership: Ownership, lag: PartitionLag, limit: int) -> Ownership:
    """The owned partitions more than `limit` records behind their end: a backlog after a
    handover or a stall, whose workloads' (pools') windows (recommendations) are stale with
    newer ones being read. Ticking them all would only add to the backlog."""
    load, recs = ownership.load, ownership.recommendations
    return Ownership(
        ownership.load_partitions,
        frozenset(p for p, n in lag.load.items() if n > limit and p in load),
        ownership.recommendation_partitions,
        frozenset(p for p, n in lag.recommendations.items() if n > limit and p in recs),
    )
