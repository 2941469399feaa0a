"""The ScalingPolicy's `status` after an actuation: replicas, last decision, the Actuated condition.

Pure: the actuator (services/actuator) reads the old status and writes what this returns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from governor.events import ScaleDecision
from governor.policy.actuation import MAX_REASON_CHARS, reason_text
from governor.spec import ScalingPolicy

ConditionStatus = Literal["True", "False", "Unknown"]
CONDITION_ACTUATED = "Actuated"


def condition_reason(code: str) -> str:
    """`owned_by_hpa` -> `OwnedByHpa` (condition reasons are CamelCase)."""
    return "".join(part.capitalize() for part in code.split("_")) or "Unknown"


def _condition(
    previous: Sequence[Mapping[str, Any]],
    type_: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    now: str,
    generation: int,
) -> dict[str, Any]:
    old = next((c for c in previous if c.get("type") == type_), None)
    changed = old is None or old.get("status") != status
    since = now if changed or old is None else str(old.get("lastTransitionTime") or now)
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message[:MAX_REASON_CHARS],
        "lastTransitionTime": since,
        "observedGeneration": generation,
    }


def policy_status(
    previous: Mapping[str, Any] | None,
    *,
    policy: ScalingPolicy,
    decision: ScaleDecision,
    outcome: Literal["applied", "noop", "refused", "failed", "dry_run"],
    reason: str,
    current_replicas: int | None,
    now: str,
) -> dict[str, Any]:
    """The ScalingPolicy's new `status` (a merge patch body for the status subresource).

    An applied decision moves currentReplicas/desiredReplicas/lastDecision*/lastReason and
    lastTransitionTime (when replicas changed); every outcome sets the `Actuated` condition, whose
    lastTransitionTime only moves when its status flips.
    """
    prev = dict(previous or {})
    conditions = [c for c in prev.get("conditions") or [] if isinstance(c, Mapping)]
    status: dict[str, Any] = {}
    ok = outcome in ("applied", "noop", "dry_run")
    if outcome in ("applied", "noop"):
        status.update(
            currentReplicas=decision.to_replicas,
            desiredReplicas=decision.to_replicas,
            lastDecisionId=decision.decision_id,
            lastDecisionSeq=decision.seq,
            lastReason=reason_text(decision.reasons),
        )
        if outcome == "applied" or "lastTransitionTime" not in prev:
            status["lastTransitionTime"] = now
    else:
        if current_replicas is not None:
            status["currentReplicas"] = current_replicas
        status["desiredReplicas"] = decision.to_replicas
        status["lastReason"] = reason[:MAX_REASON_CHARS]
    if ok:
        cond = _condition(
            conditions,
            CONDITION_ACTUATED,
            "True",
            "DryRun" if outcome == "dry_run" else "Applied",
            f"seq {decision.seq} ({decision.decision_id}): {reason}",
            now,
            policy.metadata.generation,
        )
    else:
        code = reason.partition(":")[0] if ":" in reason else outcome
        cond = _condition(
            conditions,
            CONDITION_ACTUATED,
            "False",
            condition_reason(code),
            f"seq {decision.seq} ({decision.decision_id}): {reason}",
            now,
            policy.metadata.generation,
        )
    others = [dict(c) for c in conditions if c.get("type") != CONDITION_ACTUATED]
    status["conditions"] = [*others, cond]
    status["observedGeneration"] = policy.metadata.generation
    return status
