"""Which workloads a decider tick evaluates: the one rule that the service's ticker and
`DeciderCore.tick` (the scenario runner) share, so the service and the simulator cannot tick
differently."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from governor.decider import DeciderCore


def due_by_time(
    core: DeciderCore, recent: float = math.inf, evaluated: Mapping[str, float] | None = None
) -> list[str]:
    """Every workload with load, and every member of a pool with inventory (stage 2 needs a
    pool's whole set), that `core` owns, in order; except those evaluated on their load since
    `recent` (`evaluated`: workload -> when), which time still reaches on the next tick (at least
    every two, for staleness, fallback, cooldowns and panic exit)."""
    pools = set(core.inventory_pools())
    members = {w for w, p in core.policies.items() if p.spec.pool in pools}
    owns = core.ownership.owns_workload
    done = evaluated or {}
    return [
        w
        for w in sorted(set(core.windows) | members)
        if done.get(w, -math.inf) < recent and owns(w)
    ]
