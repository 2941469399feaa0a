"""Pool summaries for `governor cluster show`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from governor.events import (
    NodeState,
)
from governor.inventory.quantities import _add, _rounded


@dataclass
class NodeSummary:
    node: str
    pool: str
    ready: bool
    schedulable: bool
    allocatable: dict[str, float]
    managed: dict[str, float]
    unmanaged: dict[str, float]
    gpus: int = 0
    gpus_healthy: int = 0
    gpus_free: int = 0  # healthy GPUs with nothing allocated
    gpu_core_free: float = 0.0  # healthy gpu-core left, 100 per GPU
    nics: int = 0
    nics_healthy: int = 0
    nics_free: int = 0  # healthy NICs with capacity left

    @property
    def free(self) -> dict[str, float]:
        out = dict(self.allocatable)
        _add(out, self.managed, -1)
        _add(out, self.unmanaged, -1)
        return _rounded(out)


@dataclass
class PoolSummary:
    pool: str | None
    nodes: list[NodeSummary]
    totals: NodeSummary


def summarize_node(n: NodeState) -> NodeSummary:
    s = NodeSummary(
        n.node,
        n.pool,
        n.ready,
        n.schedulable,
        dict(n.allocatable),
        dict(n.requested_managed),
        dict(n.requested_unmanaged),
    )
    for d in n.devices:
        if d.type == "gpu":
            s.gpus += 1
            s.gpus_healthy += d.healthy
            s.gpus_free += d.healthy and d.free >= d.total
            s.gpu_core_free += d.free if d.healthy else 0.0
        elif d.type == "rdma":
            s.nics += 1
            s.nics_healthy += d.healthy
            s.nics_free += d.healthy and d.free > 0
    return s


def summarize_pool(nodes: Iterable[NodeState], pool: str | None = None) -> PoolSummary:
    """Per-node rows and totals of one pool (or of every node when `pool` is None)."""
    rows = sorted(
        (summarize_node(n) for n in nodes if pool is None or n.pool == pool),
        key=lambda s: (s.pool, s.node),
    )
    total = NodeSummary("TOTAL", pool or "*", True, True, {}, {}, {})
    for r in rows:
        total.ready = total.ready and r.ready
        _add(total.allocatable, r.allocatable)
        _add(total.managed, r.managed)
        _add(total.unmanaged, r.unmanaged)
        for f in ("gpus", "gpus_healthy", "gpus_free", "nics", "nics_healthy", "nics_free"):
            setattr(total, f, getattr(total, f) + getattr(r, f))
        total.gpu_core_free += r.gpu_core_free
    total.allocatable = _rounded(total.allocatable)
    total.managed = _rounded(total.managed)
    total.unmanaged = _rounded(total.unmanaged)
    return PoolSummary(pool, rows, total)
