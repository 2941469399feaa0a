"""The actuator's core: one decision, its reads, and the verdict, as pure functions.

`decide(decision, policy, owners, target, rules)` is the whole order of the checks in one place:
the message alone (`precheck`), the ScalingPolicy as the API server has it (`admit`), the other
autoscalers of the namespace (`other_owners`), the target (`read_target`), the fenced patch
(`plan`), unless the target's fence already holds the decision (`Replayed`: it was applied, by
this actuator before a restart or by the other one). What the shell has not read yet is
`UNREAD`; `decide` then answers `Need` naming the next read, so a decision refused early costs
no further API call and the shell never knows the order itself:

    policy = owners = target = UNREAD
    while isinstance(v := decide(decision, policy, owners, target, rules), Need):
        ...read v.what...
    # v is a Patch (send it), a Replayed (audit it) or a Refused (record it)

After the patch, `patch_error` says what a failed one means (the fence moved: re-read and decide
again; the API server or RBAC said no; or an error to retry as a whole), and `event` is the
Kubernetes Event each outcome writes.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import msgspec

from governor.events import ActuationOutcome, ScaleDecision
from governor.policy import actuation as rules_
from governor.policy.actuation import ActuatorRules, Plan, Refusal, TargetState
from governor.spec import PolicyError, ScalingPolicy

__all__ = [
    "UNREAD",
    "Need",
    "Owners",
    "Patch",
    "Refused",
    "Replayed",
    "TargetRead",
    "decide",
    "event",
    "fence_lost",
    "outcome_of",
    "patch_error",
]


class Unread(enum.Enum):
    UNREAD = "unread"


UNREAD: Final = Unread.UNREAD  # a read the shell has not made (yet)


class Need(msgspec.Struct, frozen=True):
    """The next read `decide` needs: the ScalingPolicy, the namespace's HPAs and ScaledObjects,
    or the target (where its replicas live, then the object)."""

    what: Literal["policy", "owners", "target"]


class Owners(msgspec.Struct, frozen=True):
    hpas: Sequence[Mapping[str, Any]]
    scaled_objects: Sequence[Mapping[str, Any]]


class TargetRead(msgspec.Struct, frozen=True, kw_only=True):
    """The target as the shell found it: `pointer` of its replicas (None: a Volcano Job finds
    it in the object), `scalable` False when a CRD has no scale subresource (then nothing else
    was read), `obj` None when the object does not exist."""

    scalable: bool = True
    pointer: str | None = None
    obj: Mapping[str, Any] | None = None


class Patch(msgspec.Struct, frozen=True):
    """Send `plan.patch`; `state` is the target it was planned against."""

    plan: Plan
    state: TargetState


class Refused(msgspec.Struct, frozen=True):
    """The decision is refused. `notify`: whether an Event and the policy status say so (not
    for a malformed message or an invalid policy: no policy to write to, nobody to tell)."""

    refusal: Refusal
    state: TargetState | None = None
    notify: bool = True


class Replayed(msgspec.Struct, frozen=True):
    """The target's fence already holds this decision (its seq and digest): it was applied, and
    the actuator that patched it did not commit it (killed before its audit, or the other
    actuator's redelivery). Nothing to send; the Actuation says `replay`, so every applied
    decision has its audit record even when the first one was lost."""

    state: TargetState


def decide(
    decision: ScaleDecision,
    policy: ScalingPolicy | PolicyError | Unread | None,
    owners: Owners | Unread,
    target: TargetRead | Unread,
    rules: ActuatorRules,
) -> Patch | Replayed | Refused | Need:
    """The verdict on `decision` given what was read so far (see the module docstring)."""
    early = rules_.precheck(decision, rules)
    if early is not None:
        return Refused(early, notify=False)
    if policy is UNREAD:
        return Need("policy")
    if isinstance(policy, PolicyError):
        invalid = Refusal("invalid_policy", f"ScalingPolicy {decision.policy}: {policy}")
        return Refused(invalid, notify=False)
    admitted = rules_.admit(decision, policy, rules)
    if admitted is not None:
        return Refused(admitted)
    assert policy is not None  # admit refuses a missing policy
    ref = policy.spec.target_ref
    if owners is UNREAD:
        return Need("owners")
    owned = rules_.other_owners(ref, owners.hpas, owners.scaled_objects)
    if owned is not None:
        return Refused(owned)
    if target is UNREAD:
        return Need("target")
    if not target.scalable:
        return Refused(
            Refusal(
                "invalid_policy",
                f"{rules_.kind_key(ref.kind, ref.api_version)} has no scale subresource; "
                "set targetRef.specReplicasPath",
            )
        )
    if target.obj is None:
        return Refused(Refusal("target_not_found", f"{decision.workload} not found"))
    state = rules_.read_target(target.obj, ref, target.pointer)
    if isinstance(state, Refusal):
        return Refused(state)
    digest = rules_.decision_digest(decision)
    if rules_.is_replay(decision, state.annotations, digest):
        return Replayed(state)
    planned = rules_.plan(decision, policy, state, digest=digest)
    if isinstance(planned, Refusal):
        return Refused(planned, state)
    return Patch(planned, state)


def fence_lost(status: int, causes: bool) -> bool:
    """A failed JSON patch `test` (the fence moved: another writer was first) or a write conflict.

    The API server answers a failed `test` op with a bare 422: reason Invalid, the message "the
    server rejected our request due to an error in our request" and NO details -- unlike a
    validation error (a bad value, a CEL rule of the target's CRD), whose details list the causes
    by field. So a 422 without causes means the patch could not be applied to the object as it
    is now: re-read it and plan again (which refuses a decision the other writer made stale).
    """
    return status == 409 or (status == 422 and not causes)


def patch_error(
    status: int, causes: bool, attempt: int, attempts: int
) -> Literal["reread", "rejected", "raise"]:
    """What a failed patch means: `reread` the target and decide again (the fence moved and
    attempts are left), `rejected` (the API server or RBAC said no: not retryable, the
    decision failed), else `raise` (the whole decision fails with the API error)."""
    if fence_lost(status, causes):
        return "reread" if attempt < attempts else "raise"
    if status in (400, 403, 422):
        return "rejected"
    return "raise"


def outcome_of(patch: Patch, dry_run: bool) -> ActuationOutcome:
    """What a sent patch did: nothing in a dry run, else moved the replicas or only the fence."""
    if dry_run:
        return "dry_run"
    return "applied" if patch.plan.changes_replicas else "noop"


EVENT_REASONS: Mapping[str, tuple[str, str]] = {
    "applied": ("GovernorScaled", "Normal"),
    "noop": ("GovernorUnchanged", "Normal"),
    "refused": ("GovernorRefused", "Warning"),
}
FAILED_EVENT = ("GovernorFailed", "Warning")


def event(
    policy: ScalingPolicy,
    decision: ScaleDecision,
    outcome: ActuationOutcome,
    reason: str,
    meta: Mapping[str, Any],
    from_replicas: int | None,
    *,
    instance: str,
    now: str,
) -> dict[str, Any]:
    """The Kubernetes Event of an outcome on the target (`meta`: the target's metadata as last
    read or patched, for its uid)."""
    ref = policy.spec.target_ref
    ns = policy.metadata.namespace
    involved: dict[str, Any] = {
        "apiVersion": ref.api_version,
        "kind": ref.kind,
        "name": ref.name,
        "namespace": ns,
    }
    if meta.get("uid"):
        involved["uid"] = meta["uid"]
    event_reason, kind = EVENT_REASONS.get(outcome, FAILED_EVENT)
    ident = f"seq {decision.seq} ({decision.decision_id})"
    if outcome == "applied":
        message = (
            f"scaled {from_replicas}->{decision.to_replicas} "
            f"(seq {decision.seq}, {decision.decision_id}): {reason}"
        )
    elif outcome == "noop":
        message = f"{ident}: {reason}"
    elif outcome == "refused":
        message = f"refused {ident}: {reason}"
    else:
        message = f"{ident} failed: {reason}"
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{ref.name}.", "namespace": ns},
        "involvedObject": involved,
        "reason": event_reason,
        "message": message[:1024],
        "type": kind,
        "source": {"component": "governor-actuator"},
        "reportingComponent": "governor.dev/actuator",
        "reportingInstance": instance,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
