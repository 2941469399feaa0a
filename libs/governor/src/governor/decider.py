"""The decider's memory and its two stages, without I/O.

The service feeds it what arrives on Kafka (policies, workload states, load windows, its own
checkpoints on restart) and a clock tick; it answers with what to publish. Because it is a plain
value machine, a journal of its inputs replays to the same decisions (the pipeline test does so),
and the simulator can drive it too.

Rules it keeps:
- nothing happens for a workload until its policy AND its WorkloadState are known;
- `current` for the policy is the replicas last asked for while that request is still in flight
  (the target has not caught up yet, for at most `pending_grace` seconds) — the view HPA has
  because it writes the scale itself; otherwise the observed spec replicas;
- a decision is published when the bounded desire differs from that current, or when an earlier
  request was not taken up within `pending_grace` (it is sent again, with a new seq);
- seq is per workload and only grows; a decision never uses older input than the last one did;
- before a decision, a checkpoint (seq, history, rate-limit events, panic state) is emitted:
  the service writes it, waits for the acknowledgement, then publishes the decision.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import msgspec

from governor.events import (
    DeciderCheckpoint,
    LoadWindow,
    Recommendation,
    ScaleDecision,
    WorkloadState,
)
from governor.policy import evaluate
from governor.policy.stages import WindowKey, bound, newer, observe, recommend
from governor.policy.types import ScaleInputs, ScaleState
from governor.spec import ScalingPolicy

_STATE_ENCODER = msgspec.msgpack.Encoder()
_STATE_DECODER = msgspec.msgpack.Decoder(ScaleState)


@dataclass
class _Memory:
    state: ScaleState = field(default_factory=ScaleState)
    seq: int = 0
    last_to: int | None = None
    last_decided_at: float = 0.0
    last_newest_input: float = 0.0
    last_checkpoint_at: float = float("-inf")


@dataclass
class Outputs:
    """What one evaluation asks the service to publish, in this order."""

    checkpoint: DeciderCheckpoint | None = None
    recommendation: Recommendation | None = None
    decision: ScaleDecision | None = None
    note: str = ""  # why nothing was decided, for logs


@dataclass
class DeciderCore:
    step_seconds: float = 15.0
    pending_grace: float = 60.0
    checkpoint_every: float = 5.0
    policies: dict[str, ScalingPolicy] = field(default_factory=dict)  # by workload id
    policy_keys: dict[str, str] = field(default_factory=dict)  # namespace/name -> workload id
    workloads: dict[str, WorkloadState] = field(default_factory=dict)
    windows: dict[str, dict[WindowKey, LoadWindow]] = field(default_factory=dict)
    memory: dict[str, _Memory] = field(default_factory=dict)

    # --- inputs ---------------------------------------------------------------------------

    def on_policy(self, key: str, policy: ScalingPolicy | None) -> None:
        """A policy record (None: its tombstone)."""
        old = self.policy_keys.pop(key, None)
        if old is not None:
            self.policies.pop(old, None)
        if policy is not None:
            self.policies[policy.workload] = policy
            self.policy_keys[key] = policy.workload

    def on_workload(self, state: WorkloadState) -> None:
        known = self.workloads.get(state.workload)
        if known is None or state.observed_at >= known.observed_at:
            self.workloads[state.workload] = state

    def on_window(self, window: LoadWindow) -> None:
        series = self.windows.setdefault(window.workload, {})
        key = (window.metric, window.window)
        if newer(series.get(key), window):
            series[key] = window

    def on_checkpoint(self, cp: DeciderCheckpoint) -> None:
        """Restore after a restart; never goes back to an older checkpoint."""
        mem = self.memory.get(cp.workload)
        if mem is not None and mem.seq > cp.seq:
            return
        self.memory[cp.workload] = _Memory(
            state=_STATE_DECODER.decode(cp.scale_state) if cp.scale_state else ScaleState(),
            seq=cp.seq,
            last_to=cp.last_to,
            last_decided_at=cp.last_decided_at,
            last_newest_input=cp.last_newest_input,
            last_checkpoint_at=cp.updated_at,
        )

    # --- evaluation -----------------------------------------------------------------------

    def decide(self, workload: str, now: float) -> Outputs:
        policy = self.policies.get(workload)
        if policy is None:
            return Outputs(note="no policy")
        observed = self.workloads.get(workload)
        if observed is None:
            return Outputs(note="no WorkloadState yet: not acting")
        mem = self.memory.setdefault(workload, _Memory())
        in_flight = (
            mem.last_to is not None
            and mem.last_to != observed.spec_replicas
            and now - mem.last_decided_at < self.pending_grace
        )
        current = mem.last_to if in_flight and mem.last_to is not None else observed.spec_replicas
        seen = msgspec.structs.replace(observed, spec_replicas=current)
        observations = observe(policy.spec, self.windows.get(workload, {}))
        inputs = ScaleInputs(workload=seen, observations=observations)
        result, mem.state = evaluate(
            policy.spec, inputs, mem.state, now, step_seconds=self.step_seconds
        )
        if not result.actionable:
            return Outputs(note=", ".join(r.detail or r.rule for r in result.reasons))
        rec = recommend(policy, seen, result, now)
        to, extra = bound(rec)
        retry = to != observed.spec_replicas and now - mem.last_decided_at >= self.pending_grace
        out = Outputs(recommendation=rec)
        if to == current and not retry:
            out.checkpoint = self._maybe_checkpoint(workload, mem, now)
            out.note = "no change"
            return out
        if result.newest_input < mem.last_newest_input:
            out.note = "input older than the last decision's: not deciding on it"
            return out
        mem.seq += 1
        mem.last_to, mem.last_decided_at = to, now
        mem.last_newest_input = max(mem.last_newest_input, result.newest_input)
        out.checkpoint = self._checkpoint(workload, mem, now)
        spec = policy.spec
        out.decision = ScaleDecision(
            decision_id=f"{workload}#{mem.seq}",
            workload=workload,
            seq=mem.seq,
            from_replicas=observed.spec_replicas,
            to_replicas=to,
            reasons=[*result.reasons, *extra],
            inputs=list(result.inputs),
            policy_generation=policy.metadata.generation,
            newest_input=result.newest_input,
            decided_at=now,
            pool=spec.pool,
            target=spec.target_ref,
            policy=policy.key,
            min_available=rec.floor if spec.target_ref.scale_min_available else None,
        )
        return out

    def tick(self, now: float) -> Iterable[tuple[str, Outputs]]:
        for workload in sorted(self.policies):
            yield workload, self.decide(workload, now)

    def _checkpoint(self, workload: str, mem: _Memory, now: float) -> DeciderCheckpoint:
        mem.last_checkpoint_at = now
        return DeciderCheckpoint(
            workload=workload,
            seq=mem.seq,
            last_to=mem.last_to,
            last_decided_at=mem.last_decided_at,
            last_newest_input=mem.last_newest_input,
            scale_state=_STATE_ENCODER.encode(mem.state),
            updated_at=now,
        )

    def _maybe_checkpoint(
        self, workload: str, mem: _Memory, now: float
    ) -> DeciderCheckpoint | None:
        if now - mem.last_checkpoint_at < self.checkpoint_every:
            return None
        return self._checkpoint(workload, mem, now)
