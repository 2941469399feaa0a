"""Shadow policies: what another policy would decide on the same live inputs, never actuated.

A ScalingPolicy with `spec.mode: Shadow` names a target that already has its Active policy. The
decider evaluates it beside the Active one (`evaluate_shadow`) with the same windows and the
same observed WorkloadState, but against replicas of its own: the shadow's arm is a
counterfactual, so its "current" is what it last asked for (the observed replicas before its
first decision). Its memory is keyed by (workload, policy), checkpointed under its own key
(`DeciderCheckpoint.policy`), and its decisions go to governor.shadow-decisions, which the
actuator cannot read. `governor ab` scores the arms afterwards.

Pure: `now` is an argument; the decider keeps the `ShadowMemory` values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from governor.events import DeciderCheckpoint, ScaleDecision, WindowView, WorkloadState
from governor.policy import evaluate
from governor.policy.recommend import WindowKey, bound, observe, recommend
from governor.policy.types import ScaleInputs, ScaleState
from governor.spec import ScalingPolicy

_ENCODER = msgspec.msgpack.Encoder()
_STATE = msgspec.msgpack.Decoder(ScaleState)


class ShadowMemory(msgspec.Struct, frozen=True):
    state: ScaleState = msgspec.field(default_factory=ScaleState)
    seq: int = 0
    replicas: int | None = None  # what it last asked for: its arm's replicas
    decided_at: float = 0.0


def mode_problems(policies: Iterable[ScalingPolicy]) -> list[str]:
    """Per target: any number of Shadow policies, exactly one Active. One line per target that
    breaks the rule (empty: all good)."""
    active: dict[str, list[str]] = {}
    shadows: dict[str, list[str]] = {}
    for p in policies:
        side = shadows if p.spec.mode == "Shadow" else active
        side.setdefault(p.workload, []).append(p.key)
    out = []
    for workload in sorted(set(active) | set(shadows)):
        names = sorted(active.get(workload, []))
        if len(names) > 1:
            out.append(f"{workload}: {len(names)} Active policies ({', '.join(names)}): one only")
        elif not names:
            out.append(
                f"{workload}: Shadow policies ({', '.join(sorted(shadows[workload]))}) "
                "without an Active one: they are not evaluated"
            )
    return out


def evaluate_shadow(
    policy: ScalingPolicy,
    observed: WorkloadState,
    windows: Mapping[WindowKey, WindowView],
    mem: ShadowMemory,
    now: float,
    *,
    step_seconds: float = 15.0,
) -> tuple[ScaleDecision | None, ShadowMemory]:
    """The shadow's decision (None: no change for its arm) and its next memory."""
    current = observed.spec_replicas if mem.replicas is None else mem.replicas
    # Its arm has `current` replicas, all taken as ready: the shadow is judged on the policy,
    # not on pod start-up, which `governor ab` models when it scores the arm.
    seen = msgspec.structs.replace(observed, spec_replicas=current, ready_replicas=current)
    inputs = ScaleInputs(workload=seen, observations=observe(policy.spec, windows))
    result, state = evaluate(policy.spec, inputs, mem.state, now, step_seconds=step_seconds)
    mem = msgspec.structs.replace(mem, state=state)
    if not result.actionable:
        return None, mem
    rec = recommend(policy, seen, result, now)
    to, extra = bound(rec)
    if to == current:
        return None, mem
    seq = mem.seq + 1
    decision = ScaleDecision(
        decision_id=f"{rec.workload}#{policy.key}#{seq}",
        workload=rec.workload,
        seq=seq,
        from_replicas=current,
        to_replicas=to,
        reasons=[*result.reasons, *extra],
        inputs=list(result.inputs),
        policy_generation=policy.metadata.generation,
        newest_input=result.newest_input,
        decided_at=now,
        pool=policy.spec.pool,
        target=policy.spec.target_ref,
        policy=policy.key,
    )
    return decision, msgspec.structs.replace(mem, seq=seq, replicas=to, decided_at=now)


def evaluate_shadows(
    policies: Mapping[str, ScalingPolicy],
    observed: WorkloadState,
    windows: Mapping[WindowKey, WindowView],
    memory: dict[tuple[str, str], ShadowMemory],
    now: float,
    *,
    step_seconds: float = 15.0,
) -> tuple[list[DeciderCheckpoint], list[ScaleDecision]]:
    """Every Shadow policy of one workload (by policy key) on the same inputs, in key order;
    `memory` (by (workload, policy key)) is updated. The checkpoints go out before the
    decisions."""
    checkpoints: list[DeciderCheckpoint] = []
    decisions: list[ScaleDecision] = []
    for key, policy in sorted(policies.items()):
        held = memory.get((observed.workload, key), ShadowMemory())
        d, mem = evaluate_shadow(policy, observed, windows, held, now, step_seconds=step_seconds)
        memory[(observed.workload, key)] = mem
        if d is not None:
            checkpoints.append(checkpoint(observed.workload, key, mem, now))
            decisions.append(d)
    return checkpoints, decisions


def checkpoint(workload: str, policy: str, mem: ShadowMemory, now: float) -> DeciderCheckpoint:
    return DeciderCheckpoint(
        workload=workload,
        seq=mem.seq,
        last_to=mem.replicas,
        last_decided_at=mem.decided_at,
        scale_state=_ENCODER.encode(mem.state),
        updated_at=now,
        policy=policy,
    )


def restore(cp: DeciderCheckpoint) -> ShadowMemory:
    state = _STATE.decode(cp.scale_state) if cp.scale_state else ScaleState()
    return ShadowMemory(state=state, seq=cp.seq, replicas=cp.last_to, decided_at=cp.last_decided_at)
