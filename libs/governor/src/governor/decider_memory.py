"""The decider core's memory per workload and pool, and what one evaluation asks to publish."""

from __future__ import annotations

from dataclasses import dataclass, field

from governor.events import (
    DeciderCheckpoint,
    Recommendation,
    ScaleDecision,
    Shortfall,
    WorkloadState,
)
from governor.policy import elastic as el
from governor.policy.allocate import Allocation
from governor.policy.rebalance import ShortKey
from governor.policy.types import ScaleResult, ScaleState
from governor.spec import ScalingPolicy


@dataclass
class Memory:
    state: ScaleState = field(default_factory=ScaleState)
    seq: int = 0
    last_to: int | None = None
    last_decided_at: float = 0.0
    last_newest_input: float = 0.0
    last_checkpoint_at: float = float("-inf")
    elastic: el.ElasticState = field(default_factory=el.ElasticState)


@dataclass
class PoolMemory:
    allocation: Allocation | None = None
    seq: int = 0
    shortfalls: dict[str, ShortKey] = field(default_factory=dict)  # last published per workload


@dataclass
class Outputs:
    """What one evaluation asks the service to publish, in this order.

    Stage 1 fills `checkpoint`, `recommendation` and `decision`; a pool's stage 2 fills the lists:
    first every checkpoint (acknowledged), then the decisions, then the shortfalls.
    """

    checkpoint: DeciderCheckpoint | None = None
    recommendation: Recommendation | None = None
    decision: ScaleDecision | None = None
    note: str = ""  # why nothing was decided, for logs
    checkpoints: list[DeciderCheckpoint] = field(default_factory=list)
    decisions: list[ScaleDecision] = field(default_factory=list)
    shortfalls: list[Shortfall] = field(default_factory=list)
    # Shadow policies (governor.shadow): checkpoints acknowledged before their decisions.
    shadow_checkpoints: list[DeciderCheckpoint] = field(default_factory=list)
    shadow_decisions: list[ScaleDecision] = field(default_factory=list)


@dataclass
class Stage1View:
    policy: ScalingPolicy
    observed: WorkloadState
    mem: Memory
    current: int
    result: ScaleResult
    rec: Recommendation
