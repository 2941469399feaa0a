"""The decider core's memory per workload and pool, and what one evaluation asks to publish."""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from governor.events import (
    DeciderCheckpoint,
    Recommendation,
    ScaleDecision,
    Shortfall,
    WorkloadState,
)
from governor.policy import elastic as el
from governor.policy import staleness as stale
from governor.policy.allocate import Allocation
from governor.policy.rebalance import ShortKey
from governor.policy.types import ScaleResult, ScaleState
from governor.spec import ScalingPolicy, ScalingPolicySpec

_STATE_ENCODER = msgspec.msgpack.Encoder()
_STATE_DECODER = msgspec.msgpack.Decoder(ScaleState)
_ELASTIC_DECODER = msgspec.msgpack.Decoder(el.ElasticState)
_ALLOCATION_DECODER = msgspec.msgpack.Decoder(Allocation)

POOL_PREFIX = "pool:"
DECISION_PREFIX = "decision:"  # a stage-2 core's per-workload checkpoints


def pool_key(pool: str) -> str:
    """The checkpoint key of a pool's allocation (the decider-state topic is keyed by workload)."""
    return POOL_PREFIX + pool


def restoring_stages(cp: DeciderCheckpoint) -> tuple[int, ...]:
    """Which split cores (0: stage 1, 1: stage 2) restore a checkpoint read at an assignment.

    Stage 2's are keyed by pool or `decision:`, and a `decision:` one also seeds stage 1's seq
    (a pass-through decision continues it: `decider_handover`); stage 1's by workload, and one
    with a decision (seq > 0: a one-instance decider's, or pass-through's) also seeds stage 2's
    seq, so a seq never goes back on an upgrade or a hand-over."""
    if cp.workload.startswith(POOL_PREFIX):
        return (1,)
    if cp.workload.startswith(DECISION_PREFIX):
        return (0, 1)
    return (0, 1) if cp.seq > 0 else (0,)


@dataclass
class Memory:
    state: ScaleState = field(default_factory=ScaleState)
    seq: int = 0
    last_to: int | None = None
    last_decided_at: float = 0.0
    last_newest_input: float = 0.0
    last_checkpoint_at: float = float("-inf")
    elastic: el.ElasticState = field(default_factory=el.ElasticState)
    # The input's lag behind this core's clock: its recent floor and when that was set (memory
    # only: after a restart the floor starts again from the first lag seen).
    lag_floor: float | None = None
    lag_floor_at: float = 0.0
    # What the last checkpoint written holds (`content_of`): a flush that would write the same
    # again writes nothing. A restored memory has none, so its first flush writes (a split
    # stage 1's restore merges two checkpoints into one no record holds).
    checkpointed: tuple[object, ...] | None = None


def content_of(mem: Memory) -> tuple[object, ...]:
    """What a checkpoint of `mem` holds, but its date (its states are values: replaced on a
    change, never modified)."""
    return (mem.seq, mem.last_to, mem.last_decided_at, mem.last_newest_input, mem.state,
            mem.elastic)  # fmt: skip


def checkpointed(mem: Memory) -> bool:
    """Whether the last checkpoint written holds `mem` as it is: the usual case for a workload
    whose count held since (its history gains an entry once per step, not per evaluation)."""
    return mem.checkpointed is not None and mem.checkpointed == content_of(mem)


def held_when_late(
    mem: Memory, policy: ScalingPolicySpec, result: ScaleResult, now: float, step: float
) -> ScaleResult:
    """`result` with its scale-down held while its input runs late (`staleness.hold_late`);
    updates the workload's lag floor. A result on no input at all is left as it is."""
    if result.newest_input <= 0.0:
        return result
    lag = now - result.newest_input
    floor = mem.lag_floor
    mem.lag_floor = stale.lag_floor(floor, mem.lag_floor_at, lag, now)
    mem.lag_floor_at = now
    late_by = 0.0 if floor is None else lag - mem.lag_floor
    return stale.hold_late(result, late_by, stale.late_bound(policy, step))


def held_in_transit(
    mem: Memory,
    policy: ScalingPolicySpec,
    rec: Recommendation,
    current: int,
    now: float,
    step: float,
) -> Recommendation:
    """Stage 2's own late-input hold (a split core): `rec` with its scale-down held
    (desired = `current`, stage 2's view) while its input runs late at `now`; updates the
    workload's lag floor in stage 2's memory.

    Stage 1's hold judges the input when it evaluates; a recommendation made on fresh input can
    still reach stage 2 late: a decider cut off from the broker holds its publish until the
    heal, and the pool's allocation would then lower replicas on what the load was 20 s before
    (the CI subset's decider-broker-partition-20s: web-05 2 -> 1 at the heal + 0.2 s on input
    20.8 s old). Stage 2's lag is its own clock minus the input's newest sample, against its
    own floor, so a steady offset holds nothing here either."""
    probe = ScaleResult(
        desired=rec.desired,
        current=current,
        bound_by="metric",
        reasons=rec.reasons,
        inputs=rec.inputs,
        newest_input=rec.newest_input,
    )
    held = held_when_late(mem, policy, probe, now, step)
    if held is probe:
        return rec
    return msgspec.structs.replace(rec, desired=held.desired, reasons=list(held.reasons))


def with_count(observed: WorkloadState, current: int) -> WorkloadState:
    """The target as stage 1 sees it: `current` replicas (a decision in flight counts). The same
    object when that is what it reports: no copy per message in the usual case."""
    if current == observed.spec_replicas:
        return observed
    return msgspec.structs.replace(observed, spec_replicas=current)


@dataclass
class PoolMemory:
    allocation: Allocation | None = None
    seq: int = 0
    shortfalls: dict[str, ShortKey] = field(default_factory=dict)  # last published per workload


def memory_of(cp: DeciderCheckpoint) -> Memory:
    """A workload's memory as its checkpoint has it."""
    return Memory(
        state=_STATE_DECODER.decode(cp.scale_state) if cp.scale_state else ScaleState(),
        seq=cp.seq,
        last_to=cp.last_to,
        last_decided_at=cp.last_decided_at,
        last_newest_input=cp.last_newest_input,
        last_checkpoint_at=cp.updated_at,
        elastic=_ELASTIC_DECODER.decode(cp.elastic_state)
        if cp.elastic_state
        else el.ElasticState(),
    )


def pool_memory_of(cp: DeciderCheckpoint) -> PoolMemory:
    """A pool's memory (its allocation) as its checkpoint has it."""
    allocation = _ALLOCATION_DECODER.decode(cp.allocation) if cp.allocation else None
    return PoolMemory(allocation=allocation, seq=cp.seq)


def checkpoint_of(key: str, mem: Memory, now: float) -> DeciderCheckpoint:
    """The checkpoint (keyed `key`) of a workload's memory at `now`, which it then dates."""
    mem.last_checkpoint_at = now
    mem.checkpointed = content_of(mem)
    return DeciderCheckpoint(
        workload=key,
        seq=mem.seq,
        last_to=mem.last_to,
        last_decided_at=mem.last_decided_at,
        last_newest_input=mem.last_newest_input,
        scale_state=_STATE_ENCODER.encode(mem.state),
        updated_at=now,
        elastic_state=_STATE_ENCODER.encode(mem.elastic)
        if mem.elastic != el.ElasticState()
        else b"",
    )


class Outputs(msgspec.Struct, gc=False):
    """What one evaluation asks the service to publish, in this order.

    Stage 1 fills `checkpoint`, `recommendation` and `decision`; a pool's stage 2 fills the lists:
    first every checkpoint (acknowledged), then the decisions, then the shortfalls.

    A msgspec Struct, not a dataclass: one is built per evaluation, and a dataclass's __init__
    with five list factories was a visible share of the decider's per-message cost
    (bench/decider_cores.py). `gc=False`: it holds lists of events, never itself.
    """

    checkpoint: DeciderCheckpoint | None = None
    recommendation: Recommendation | None = None
    decision: ScaleDecision | None = None
    note: str = ""  # why nothing was decided, for logs
    checkpoints: list[DeciderCheckpoint] = msgspec.field(default_factory=list)
    decisions: list[ScaleDecision] = msgspec.field(default_factory=list)
    shortfalls: list[Shortfall] = msgspec.field(default_factory=list)
    # Shadow policies (governor.shadow): checkpoints acknowledged before their decisions.
    shadow_checkpoints: list[DeciderCheckpoint] = msgspec.field(default_factory=list)
    shadow_decisions: list[ScaleDecision] = msgspec.field(default_factory=list)


class Stage1View(msgspec.Struct, gc=False):
    """Stage 1's evaluation of one workload, as stage 2 reads it (one per evaluation)."""

    policy: ScalingPolicy
    observed: WorkloadState
    mem: Memory
    current: int
    result: ScaleResult
    rec: Recommendation
