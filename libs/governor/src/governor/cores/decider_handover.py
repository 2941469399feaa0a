"""Where a workload's stage 2 runs, and how its decision memory crosses between the stages.

Stage 2 needs a pool-wide view only when something couples the pool's workloads: an allocation
over the pool's nodes (`DeciderCore.decide_pool`, which is also the only place the quotas and
queues tables constrain replicas). A pool "has inventory" once the cluster table holds a node of
it. For a workload whose pool has none, stage 2 is the policy's bounds alone (`bound`), per
workload; for a non-elastic one it needs no memory stage 1 does not already hold. Such a
workload **passes through**: the decider that owns its `governor.load` partition decides it in
stage 1, so the work of a big pool without inventory spreads over every decider (keyed by
workload) instead of landing on the one owning the pool's `governor.recommendations` partition.
Its recommendation is still published (`decided=True`) for the topic's readers; stage 2 drops it.

The ownership switch, per workload, between two assignments of the group:
- stage 1 decides the workload itself while `passes_through` holds and it has not handed the
  workload to stage 2 since the last assignment;
- from the first evaluation where it does not hold (the pool gained a node, in this decider's
  view of the cluster table), stage 1 stops deciding and hands over: every recommendation it
  publishes carries its decision memory (`last_seq` ...), which stage 2 raises its own to
  (`raise_to`) before deciding on it, so a seq continues above every pass-through decision;
- a handed workload stays handed until the next assignment, even if its pool loses its nodes
  again (stage 2 then decides it bounds-only on its recommendations, as before): stage 1 cannot
  see stage 2's seq while both run;
- at an assignment every owner reads `governor.decider-state` (each decision's checkpoint is
  acknowledged before the decision is published): stage 1 restores a workload from the newer of
  its own checkpoint and stage 2's (`merged_checkpoint`), so a pass-through decision after the
  assignment continues stage 2's seq too.
A window is evaluated by one stage 1 only (the owner of its load partition), and each evaluation
either decides (pass-through) or recommends, never both; stage 2 decides only on recommendations
that are not `decided`. The one case this cannot close: a stage-1 owner restarted under static
membership (`group_instance_id`) gets its partitions back without a group rebalance, so stage 2
keeps the recommendations of workloads handed over before; if the pool has nodes in stage 2's
view and none in the restarted one's, both may decide such a workload until they agree. The
actuator's fence (seq and digest on the target) refuses the one that comes second.
"""

from __future__ import annotations

from collections.abc import Collection

import msgspec

from governor.cores.decider_memory import DECISION_PREFIX, Memory
from governor.events import DeciderCheckpoint, Recommendation
from governor.spec import ScalingPolicySpec


def passes_through(spec: ScalingPolicySpec, inventory: Collection[str]) -> bool:
    """Whether stage 1 may decide this policy's workload itself: its pool has no node in the
    cluster table (no allocation, quota or queue couples it to other workloads) and it is not an
    elastic training job (stage 2 keeps the restart-damping state that resizes it)."""
    return spec.pool not in inventory and spec.elastic is None


def handed_over(rec: Recommendation, mem: Memory) -> Recommendation:
    """`rec` carrying stage 1's decision memory, for the stage 2 that takes the workload over."""
    return msgspec.structs.replace(
        rec,
        last_seq=mem.seq,
        last_to=mem.last_to,
        last_decided_at=mem.last_decided_at,
        last_newest_input=mem.last_newest_input,
    )


def raise_to(mem: Memory, rec: Recommendation) -> None:
    """Stage 2's memory of a workload raised to what `rec` says stage 1 decided: a decision made
    after this one is numbered above it, and never decides on older input."""
    if rec.last_seq > mem.seq:
        mem.seq = rec.last_seq
        mem.last_to = rec.last_to
        mem.last_decided_at = rec.last_decided_at
    mem.last_newest_input = max(mem.last_newest_input, rec.last_newest_input)


def merged_checkpoint(
    stage1: DeciderCheckpoint | None, stage2: DeciderCheckpoint | None
) -> DeciderCheckpoint | None:
    """Stage 1's checkpoint of a workload (key: workload) with the decision memory of whichever
    stage decided it last (stage 2's key `decision:<workload>`); its policy state stays stage
    1's (stage 2 keeps none)."""
    if stage2 is None:
        return stage1
    newest = max(stage2.last_newest_input, stage1.last_newest_input if stage1 else 0.0)
    if stage1 is None:
        return msgspec.structs.replace(
            stage2,
            workload=stage2.workload.removeprefix(DECISION_PREFIX),
            scale_state=b"",
            elastic_state=b"",
        )
    if stage2.seq <= stage1.seq:
        return msgspec.structs.replace(stage1, last_newest_input=newest)
    return msgspec.structs.replace(
        stage1,
        seq=stage2.seq,
        last_to=stage2.last_to,
        last_decided_at=stage2.last_decided_at,
        last_newest_input=newest,
    )
