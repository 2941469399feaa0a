"""The decider's memory and its two stages, without I/O.

The service feeds it what arrives on Kafka (policies, workload states, load windows, its own
checkpoints on restart) and a clock tick; it answers with what to publish. A journal of its
inputs replays to the same decisions (the pipeline test does so); the simulator drives it too.

Rules it keeps:
- nothing happens for a workload until its policy AND its WorkloadState are known;
- `current` for the policy is the replicas last asked for while that request is still in flight
  (the target has not caught up yet, for at most `pending_grace` seconds) — the view HPA has
  because it writes the scale itself; otherwise the observed spec replicas;
- a decision is published when the bounded desire differs from that current, or when an earlier
  request was not taken up within `pending_grace` (it is sent again, with a new seq);
- seq is per workload and only grows; a decision never uses older input than the last one did,
  nor lowers replicas on input no newer (`frozen_scale_down`) or running late (`held_when_late`;
  a split stage 2 judges it again as a recommendation arrives: `held_in_transit`);
- a decision's checkpoint (seq, history, rate-limit events, panic state) is acknowledged first.

Stage 2 (`policy.rebalance`). A pool "has inventory" once the cluster table holds a node of it.
Then `decide(workload)` only runs stage 1 and keeps the pool's latest recommendation per
workload; `decide_pool(pool)` runs the allocation over all of them at once (each evaluation of a
load window is followed by one `decide_pool` per touched pool, and every tick runs stage 1 for
every workload of such pools, then `decide_pool` once per pool), and emits a decision only for a
workload whose target differs from what it runs or was last asked for — the same
in-flight/retry rules as stage 1. A pool without nodes in the cluster table keeps today's
bounds-only path, decided on the event itself. Elastic training jobs are restart-damped on both
paths (`policy.elastic`). The pool's previous Allocation is kept in memory and checkpointed
(workload "pool:<name>") before the decisions it allows; the shortfalls published are
remembered in memory only (a restart publishes the current ones once more). The quotas and
queues tables (`on_quota`, `on_queue`) constrain every pool's allocation (`policy.quotas.
constraints`: a quota's workloads in other pools count at their spec replicas).

Several deciders (`role`): the service runs a "stage1" core (the workloads of the load
partitions it owns; it only recommends, for every pool; its checkpoints, keyed by workload, are
flushed by `checkpoints_due` before the load offsets are committed) and a "stage2" core (the
recommendations of the pools it owns: `decide_recommended` or `decide_pool`; checkpoints keyed
"decision:<workload>"). A split core applies a checkpoint on the workload's (pool's) first use,
so a journal replay and the service agree; `assign` drops what it no longer owns. The default
role "both" holds both stages in one memory (the simulator, tests).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal

import msgspec

from governor import shadow as sh
from governor.cores.decider_due import PartitionLag, behind, due_now, due_pools
from governor.cores.decider_handover import handed_over, merged_checkpoint, passes_through, raise_to
from governor.cores.decider_memory import DECISION_PREFIX as DECISION_PREFIX
from governor.cores.decider_memory import POOL_PREFIX as POOL_PREFIX
from governor.cores.decider_memory import (
    Memory,
    Outputs,
    PoolMemory,
    Stage1View,
    checkpoint_of,
    checkpointed,
    held_in_transit,
    held_when_late,
    memory_of,
    pool_memory_of,
    with_count,
)
from governor.cores.decider_memory import pool_key as pool_key
from governor.cores.decider_pool import decide_pool
from governor.events import (
    DeciderCheckpoint,
    LoadWindow,
    NodeState,
    QueueState,
    QuotaState,
    Reason,
    Recommendation,
    ScaleDecision,
    WindowView,
    WorkloadState,
)
from governor.ownership import Ownership
from governor.policy import elastic as el
from governor.policy import evaluate as evaluate_policy
from governor.policy.recommend import (
    WindowKey,
    bound,
    capped,
    keep_newest,
    observe,
    partition_cap,
    recommend,
    signature,
)
from governor.policy.staleness import frozen_scale_down
from governor.policy.types import ScaleInputs, ScaleResult, ScaleState
from governor.spec import ScalingPolicy, ScalingPolicySpec

Role = Literal["both", "stage1", "stage2"]
Evaluate = Callable[..., tuple[ScaleResult, ScaleState]]
"""governor.policy.evaluate(policy, inputs, state, now, *, step_seconds) -> (result, state)."""


@dataclass
class DeciderCore:
    step_seconds: float = 15.0
    pending_grace: float = 60.0
    checkpoint_every: float = 5.0
    # Stage 2's hysteresis margin (allocate's `margin`). 0 by default: stage 1 already applies the
    # policy's tolerance band, and a second band would hold a service below its damped desire
    # even with free room; equal demands still keep the previous allocation and its placement.
    allocation_margin: float = 0.0
    policies: dict[str, ScalingPolicy] = field(default_factory=dict)  # by workload id
    policy_keys: dict[str, str] = field(default_factory=dict)  # namespace/name -> workload id
    workloads: dict[str, WorkloadState] = field(default_factory=dict)
    # The newest view of each series, as it came off the wire (a load message or its `more`).
    windows: dict[str, dict[WindowKey, WindowView]] = field(default_factory=dict)
    memory: dict[str, Memory] = field(default_factory=dict)
    nodes: dict[str, NodeState] = field(default_factory=dict)  # the cluster table, by node
    _cap_memo: dict[tuple[str, int], tuple[ScalingPolicySpec, ScalingPolicySpec]] = field(
        default_factory=dict
    )
    recommendations: dict[str, dict[str, Recommendation]] = field(default_factory=dict)  # by pool
    pools: dict[str, PoolMemory] = field(default_factory=dict)
    # The quotas and queues tables (topics governor.quotas, governor.queues), by key.
    quotas: dict[str, QuotaState] = field(default_factory=dict)
    queues: dict[str, QueueState] = field(default_factory=dict)
    # Shadow policies by workload, then policy key; their memory by (workload, policy key).
    # Evaluated where stage 1 runs, on the same inputs.
    shadows: dict[str, dict[str, ScalingPolicy]] = field(default_factory=dict)
    shadow_memory: dict[tuple[str, str], sh.ShadowMemory] = field(default_factory=dict)
    role: Role = "both"
    # The policy's evaluation; the simulator's reference runs bring their own (the oracle's plan).
    evaluate: Evaluate = evaluate_policy
    ownership: Ownership = field(default_factory=Ownership.all)
    # The owned partitions more than `behind_records` behind their end at the last `tick` given
    # the lag (`decider_due.behind`): the tick leaves their workloads (load) and pools
    # (recommendations) to the catch-up.
    behind: Ownership = field(default_factory=Ownership)
    behind_records: int = 2_000
    # Split roles: checkpoints read at the last assignment, applied on first use (by key).
    restorable: dict[str, DeciderCheckpoint] = field(default_factory=dict)
    # Stage 1: workloads evaluated since the last `checkpoints_due`.
    dirty: dict[str, None] = field(default_factory=dict)
    # Stage 1: a recommendation stage 2 would decide nothing new on (the same `signature`) is
    # published again only after this long; (signature, when published) per workload.
    republish_seconds: float = 30.0
    published: dict[str, tuple[tuple[object, ...], float]] = field(default_factory=dict)
    # Stage 2: after an assignment, pools are allocated only once every member had the time to
    # recommend (stage 1 recommends each workload of a pool with inventory every tick).
    settle_seconds: float = 2.5
    settled_at: float = float("-inf")
    # Stage 1: the service's tick, and when each workload was last evaluated on its load
    # (`evaluated_on_load`): one evaluated within `decider_due.LOAD_SKIP_TICKS` ticks is not due.
    tick_seconds: float = 1.0
    evaluated: dict[str, float] = field(default_factory=dict)
    _inventory: frozenset[str] = frozenset()  # the pools of `nodes`
    # Stage 1 decides a workload of a pool without inventory itself (`decider_handover`); the
    # workloads it handed to stage 2 since the last assignment (they stay there until the next).
    pass_through: bool = True
    handed: dict[str, None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.role != "both" and self.ownership.everything:
            self.ownership = Ownership()  # a split core owns nothing until it is assigned

    # --- inputs ---------------------------------------------------------------------------

    def on_policy(self, key: str, policy: ScalingPolicy | None) -> None:
        """A policy record (None: its tombstone)."""
        for shadows in self.shadows.values():
            shadows.pop(key, None)
        if policy is not None and policy.spec.mode == "Shadow":
            self.shadows.setdefault(policy.workload, {})[key] = policy
            policy = None  # and it is no longer the Active one, if it was
        old = self.policy_keys.pop(key, None)
        if old is not None:
            self.policies.pop(old, None)
            for recs in self.recommendations.values():
                recs.pop(old, None)
        if policy is not None:
            self.policies[policy.workload] = policy
            self.policy_keys[key] = policy.workload
        if old is not None and old not in self.policies:
            self.evaluated.pop(old, None)

    def on_workload(self, state: WorkloadState) -> None:
        known = self.workloads.get(state.workload)
        if known is None or state.observed_at >= known.observed_at:
            self.workloads[state.workload] = state

    def on_window(self, window: LoadWindow) -> None:
        keep_newest(self.windows.setdefault(window.workload, {}), window.metric, (window,))

    def on_load(self, message: LoadWindow) -> None:
        """A load message: the same as `on_window` of each of `windows.views(message)`, without
        building a LoadWindow per window it carries (the decider's hot path)."""
        views = (message, *message.more) if message.more else (message,)
        keep_newest(self.windows.setdefault(message.workload, {}), message.metric, views)

    def on_node(self, node: NodeState) -> None:
        """A node of the cluster table (topic governor.cluster): capacity, devices, health."""
        self.nodes[node.node] = node
        self._inventory = frozenset(n.pool for n in self.nodes.values())

    def on_node_deleted(self, name: str) -> None:
        """A node's tombstone on the cluster table."""
        self.nodes.pop(name, None)
        self._inventory = frozenset(n.pool for n in self.nodes.values())

    def on_quota(self, key: str, quota: QuotaState | None) -> None:
        """A ResourceQuota of the quotas table (None: its tombstone)."""
        if quota is None:
            self.quotas.pop(key, None)
        else:
            self.quotas[key] = quota

    def on_queue(self, key: str, queue: QueueState | None) -> None:
        """A Volcano Queue of the queues table (None: its tombstone)."""
        if queue is None:
            self.queues.pop(key, None)
        else:
            self.queues[key] = queue

    def on_checkpoint(self, cp: DeciderCheckpoint) -> None:
        """Restore after a restart; never goes back to an older checkpoint. A split core keeps
        it for the workload's (pool's) first use after the assignment."""
        if cp.policy:  # a shadow policy's
            held = self.shadow_memory.get((cp.workload, cp.policy))
            if held is None or held.seq <= cp.seq:
                self.shadow_memory[(cp.workload, cp.policy)] = sh.restore(cp)
            return
        if self.role != "both":
            known = self.restorable.get(cp.workload)
            if known is None or cp.seq >= known.seq:
                self.restorable[cp.workload] = cp
            return
        self._restore(cp)

    def assign(self, ownership: Ownership, now: float = float("-inf")) -> None:
        """A rebalance at `now`: forget every workload's and pool's memory (the tables stay);
        the checkpoints that follow (`on_checkpoint`) restore what this instance now owns."""
        self.ownership = ownership
        self.behind = Ownership()
        self.settled_at = now + self.settle_seconds
        held = (self.memory, self.windows, self.recommendations, self.pools, self.published)
        for table in (*held, self.evaluated):
            table.clear()
        self.restorable.clear()
        self.dirty.clear()
        self.handed.clear()
        self.shadow_memory.clear()

    def _mem(self, workload: str) -> Memory:
        """A workload's memory; in a split core restored from its checkpoint on first use."""
        mem = self.memory.get(workload)
        if mem is not None:
            return mem
        if self.role == "stage1":  # with stage 2's decisions, which pass-through continues
            decided = self.restorable.pop(DECISION_PREFIX + workload, None)
            cp = merged_checkpoint(self.restorable.pop(workload, None), decided)
        else:
            legacy = self.restorable.pop(workload, None)  # a one-instance decider's checkpoint
            cp = self.restorable.pop(DECISION_PREFIX + workload, None)
            if legacy is not None and (cp is None or legacy.seq > cp.seq):
                cp = msgspec.structs.replace(legacy, workload=DECISION_PREFIX + workload)
        if cp is not None:
            self._restore(cp)
        return self.memory.setdefault(workload, Memory())

    def pool_memory(self, pool: str) -> PoolMemory:
        pm = self.pools.get(pool)
        if pm is not None:
            return pm
        cp = self.restorable.pop(pool_key(pool), None)
        if cp is not None:
            self._restore(cp)
        return self.pools.setdefault(pool, PoolMemory())

    def _restore(self, cp: DeciderCheckpoint) -> None:
        if cp.workload.startswith(POOL_PREFIX):
            pool = cp.workload.removeprefix(POOL_PREFIX)
            known = self.pools.get(pool)
            if known is not None and known.seq > cp.seq:
                return
            self.pools[pool] = pool_memory_of(cp)
            return
        workload = cp.workload.removeprefix(DECISION_PREFIX)
        mem = self.memory.get(workload)
        if mem is not None and mem.seq > cp.seq:
            return
        self.memory[workload] = memory_of(cp)

    # --- evaluation -----------------------------------------------------------------------

    def has_inventory(self, pool: str) -> bool:
        """Whether the cluster table holds a node of this pool (then stage 2 allocates)."""
        return pool in self._inventory  # asked per evaluation: not a scan of the nodes

    def inventory_pools(self) -> list[str]:
        return sorted(self._inventory)

    def pool_of(self, workload: str) -> str | None:
        policy = self.policies.get(workload)
        return policy.spec.pool if policy is not None else None

    def _stage1(self, workload: str, now: float) -> Stage1View | Outputs:
        policy = self.policies.get(workload)
        if policy is None:
            return Outputs(note="no policy")
        observed = self.workloads.get(workload)
        if observed is None:
            return Outputs(note="no WorkloadState yet: not acting")
        mem = self._mem(workload)
        current = self._current(mem, observed, now)
        seen = with_count(observed, current)
        windows = self.windows.get(workload, {})
        inputs = ScaleInputs(workload=seen, observations=observe(policy.spec, windows))
        spec = capped(self._cap_memo, workload, policy.spec, partition_cap(policy.spec, windows))
        step = self.step_seconds
        result, mem.state = self.evaluate(spec, inputs, mem.state, now, step_seconds=step)
        result = held_when_late(mem, spec, result, now, step)
        throughput = None
        if policy.spec.elastic is not None:
            tput = windows.get((el.THROUGHPUT_METRIC, "stable"))
            if tput is not None and tput.count and observed.ready_replicas == current:
                throughput = tput.mean
                if self.role == "both":
                    mem.elastic = el.measured(mem.elastic, current, tput.mean)
        if self.role == "stage1":
            self.dirty[workload] = None
        if not result.actionable:
            return Outputs(note=", ".join(r.detail or r.rule for r in result.reasons))
        rec = recommend(policy, seen, result, now)
        if self.role == "stage1" and throughput is not None:
            # Stage 2 holds the elastic state (it resizes): it records the measurement.
            rec = msgspec.structs.replace(rec, throughput=throughput)
        return Stage1View(policy, observed, mem, current, result, rec)

    def _current(self, mem: Memory, observed: WorkloadState, now: float) -> int:
        in_flight = (
            mem.last_to is not None
            and mem.last_to != observed.spec_replicas
            and now - mem.last_decided_at < self.pending_grace
        )
        return mem.last_to if in_flight and mem.last_to is not None else observed.spec_replicas

    def decide(self, workload: str, now: float) -> Outputs:
        if self.role == "stage2":
            return self.decide_recommended(workload, now)
        out = self._decide_active(workload, now)
        observed = self.workloads.get(workload)
        if self.shadows.get(workload) and workload in self.policies and observed is not None:
            cps, ds = sh.evaluate_shadows(self.shadows[workload], observed,
                                          self.windows.get(workload, {}), self.shadow_memory,
                                          now, step_seconds=self.step_seconds)  # fmt: skip
            out.shadow_checkpoints += cps
            out.shadow_decisions += ds
        return out

    def _decide_active(self, workload: str, now: float) -> Outputs:
        s1 = self._stage1(workload, now)
        if isinstance(s1, Outputs):
            return s1
        rec, mem = s1.rec, s1.mem
        if self.role == "stage1":
            return self._stage1_out(s1, now)
        if self.has_inventory(rec.pool):
            # Stage 2 decides over the whole pool (`decide_pool`).
            self.recommendations.setdefault(rec.pool, {})[workload] = rec
            return Outputs(
                recommendation=rec,
                checkpoint=self._maybe_checkpoint(workload, mem, now),
                note=f"pool {rec.pool} has inventory: stage 2 decides",
            )
        out = Outputs(recommendation=rec)
        self._bounds_only(s1, now, out)
        return out

    def _stage1_out(self, s1: Stage1View, now: float) -> Outputs:
        """A split stage 1: the decision itself where the workload passes through, else the
        recommendation for stage 2 (where the pool is owned), with the decision memory."""
        workload = s1.rec.workload
        if (
            self.pass_through
            and workload not in self.handed
            and passes_through(s1.policy.spec, self._inventory)
        ):
            out = Outputs()
            self._bounds_only(s1, now, out)
            if not self._unchanged(s1.rec, now):  # for the topic's readers; stage 2 drops it
                out.recommendation = msgspec.structs.replace(s1.rec, decided=True)
            return out
        self.handed[workload] = None
        rec = handed_over(s1.rec, s1.mem)
        if self._unchanged(rec, now):
            return Outputs(note="recommendation unchanged")
        return Outputs(recommendation=rec)

    def _bounds_only(self, s1: Stage1View, now: float, out: Outputs) -> None:
        """Stage 2 for a pool without inventory: the policy's bounds and restart damping."""
        rec, mem = s1.rec, s1.mem
        to, extra = bound(rec)
        elastic = s1.policy.spec.elastic
        if elastic is not None:
            v, mem.elastic = el.judge(
                elastic,
                mem.elastic,
                current=s1.current,
                target=to,
                want=to,
                floor=min(rec.floor, to),
                now=now,
                restarts=s1.observed.restarts,
                started_at=s1.observed.started_at,
            )
            to = v.replicas
            if v.reason is not None:
                extra = [*extra, v.reason]
        self.decision(s1, to, [*s1.result.reasons, *extra], now, out)

    def on_recommendation(self, rec: Recommendation) -> None:
        """A recommendation off governor.recommendations; the newest per workload is kept (one
        stage 1 decided itself is not stage 2's to decide)."""
        if rec.decided:
            return
        recs = self.recommendations.setdefault(rec.pool, {})
        known = recs.get(rec.workload)
        order = (rec.newest_input, rec.computed_at)
        if known is None or order >= (known.newest_input, known.computed_at):
            recs[rec.workload] = rec

    def _unchanged(self, rec: Recommendation, now: float) -> bool:
        """Whether stage 1 may skip publishing `rec`: bounds-only stage 2 would decide the same
        on the last one it got (a pool's allocation and elastic jobs get every one)."""
        if rec.elastic or self.has_inventory(rec.pool):
            return False
        sig = signature(rec)
        last = self.published.get(rec.workload)
        if last is not None and last[0] == sig and now - last[1] < self.republish_seconds:
            return True
        self.published[rec.workload] = (sig, now)
        return False

    def decide_recommended(self, workload: str, now: float) -> Outputs:
        """Stage 2 on a workload's latest recommendation, for a pool without inventory (one with
        inventory is decided whole, by `decide_pool`)."""
        policy = self.policies.get(workload)
        if policy is None:
            return Outputs(note="no policy")
        rec = self.recommendations.get(policy.spec.pool, {}).get(workload)
        if rec is None:
            return Outputs(note="no recommendation yet")
        if self.has_inventory(rec.pool):
            return Outputs(note=f"pool {rec.pool} has inventory: stage 2 decides")
        s1 = self.stage2_view(workload, rec, now)
        if s1 is None:
            return Outputs(note="no WorkloadState yet: not acting")
        out = Outputs()
        self._bounds_only(s1, now, out)
        return out

    def checkpoints_due(self, now: float) -> list[DeciderCheckpoint]:
        """Stage 1: the checkpoints of every workload evaluated since the last call (written
        and acknowledged before the load offsets behind them are committed), but those whose
        last checkpoint holds the same (`decider_memory.checkpointed`)."""
        due = []
        for workload in self.dirty:
            mem = self.memory.get(workload)
            if mem is not None and not checkpointed(mem):
                due.append(self._checkpoint(workload, mem, now))
        self.dirty.clear()
        return due

    def stage2_view(self, workload: str, rec: Recommendation, now: float) -> Stage1View | None:
        """A recommendation as stage 2 sees it, with this core's memory of the workload."""
        policy = self.policies.get(workload)
        observed = self.workloads.get(workload)
        if policy is None or observed is None:
            return None
        mem = self._mem(workload)
        raise_to(mem, rec)  # above what stage 1 decided before it handed the workload over
        current = self._current(mem, observed, now)
        measured = rec.throughput is not None and observed.ready_replicas == current
        if self.role == "stage2" and measured and rec.throughput is not None:
            mem.elastic = el.measured(mem.elastic, current, rec.throughput)
        if self.role == "stage2":  # "both" judged the input as it evaluated (`_stage1`)
            rec = held_in_transit(mem, policy.spec, rec, current, now, self.step_seconds)
        result = ScaleResult(
            desired=rec.desired,
            current=rec.current,
            bound_by="metric",
            reasons=rec.reasons,
            inputs=rec.inputs,
            newest_input=rec.newest_input,
        )
        return Stage1View(policy, observed, mem, current, result, rec)

    def decision(
        self, s1: Stage1View, to: int, reasons: list[Reason], now: float, out: Outputs
    ) -> ScaleDecision | None:
        """Fill `out` with the decision to `to` (and its checkpoint) when one is due."""
        workload, mem, observed = s1.rec.workload, s1.mem, s1.observed
        retry = to != observed.spec_replicas and now - mem.last_decided_at >= self.pending_grace
        if to == s1.current and not retry:
            out.checkpoint = self._maybe_checkpoint(workload, mem, now)
            out.note = "no change"
            return None
        if s1.result.newest_input < mem.last_newest_input:
            out.note = "input older than the last decision's: not deciding on it"
            return None
        newest, desired = s1.result.newest_input, s1.rec.desired
        if frozen_scale_down(s1.current, to, desired, mem.last_to, newest, mem.last_newest_input):
            out.note = "no input newer than the last change's: a frozen window lowers nothing"
            return None
        if s1.policy.spec.elastic is not None and to != s1.current:
            mem.elastic = el.resized(mem.elastic, now)
        mem.seq += 1
        mem.last_to, mem.last_decided_at = to, now
        mem.last_newest_input = max(mem.last_newest_input, s1.result.newest_input)
        out.checkpoint = self._checkpoint(workload, mem, now)
        spec = s1.policy.spec
        out.decision = ScaleDecision(
            decision_id=f"{workload}#{mem.seq}",
            workload=workload,
            seq=mem.seq,
            from_replicas=observed.spec_replicas,
            to_replicas=to,
            reasons=reasons,
            inputs=list(s1.result.inputs),
            policy_generation=s1.policy.metadata.generation,
            newest_input=s1.result.newest_input,
            decided_at=now,
            pool=spec.pool,
            target=spec.target_ref,
            policy=s1.policy.key,
            min_available=s1.rec.floor if spec.target_ref.scale_min_available else None,
            evaluated_at=s1.rec.computed_at,
        )
        return out.decision

    def decide_pool(self, pool: str, now: float) -> Outputs:
        """Stage 2 for a pool with inventory: allocation over its latest recommendations."""
        return decide_pool(self, pool, now)

    def evaluated_on_load(self, workloads: Iterable[str], now: float) -> None:
        """These were just evaluated on their load (`decide`): the next tick may skip them."""
        for workload in workloads:
            self.evaluated[workload] = now

    def tick(self, now: float, lag: PartitionLag | None = None) -> Iterator[tuple[str, Outputs]]:
        """The clock: stage 1 of every workload due (`decider_due.due_now`), then stage 2 of
        each owned pool with inventory (keyed `pool_key`); a split core runs its own stage.
        `lag` (the service's consumer): a partition behind leaves its workloads and pools out
        (`decider_due.behind`). Lazy: each evaluation happens as it is taken, so the shell can
        time each."""
        if lag is not None:
            self.behind = behind(self.ownership, lag, self.behind_records)
        if self.role != "stage2":
            for workload in due_now(self, now):
                yield workload, self.decide(workload, now)
        if self.role != "stage1":
            for pool in due_pools(self):
                yield pool_key(pool), self.decide_pool(pool, now)

    def _checkpoint(self, workload: str, mem: Memory, now: float) -> DeciderCheckpoint:
        key = DECISION_PREFIX + workload if self.role == "stage2" else workload
        return checkpoint_of(key, mem, now)

    def _maybe_checkpoint(self, workload: str, mem: Memory, now: float) -> DeciderCheckpoint | None:
        # A split stage 1's memory goes out with `checkpoints_due` (before the offsets' commit).
        if self.role == "stage1" or now - mem.last_checkpoint_at < self.checkpoint_every:
            return None
        if checkpointed(mem):
            mem.last_checkpoint_at = now
            return None
        return self._checkpoint(workload, mem, now)
