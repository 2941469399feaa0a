"""What the actuator decides, as pure functions: whether a decision may touch its target, and
the one fenced JSON patch that applies it.

The actuator (services/actuator) only moves data: it reads the ScalingPolicy and the target
from the API server, calls `admit` and `plan`, sends the patch, and writes what came out
(Actuation record, Event, ScalingPolicy status built by `status.policy_status`; requests
paced by `pacing`).

Fencing (DESIGN.md "Data flow"). Every decision carries a per-workload `seq`. The target's
annotation `governor.dev/decision-seq` holds the seq last applied, and it is written in the SAME
JSON patch as the replicas, so the patch is a compare-and-swap on the seq:

* the seq annotation exists (value S, S < seq): ``test`` it still holds S, then replace the
  replicas path and the annotations. A writer that moved it in between makes the ``test`` fail
  (HTTP 422): the actuator re-reads the target and calls `plan` again, which refuses the
  decision as stale if the other writer's seq is newer.
* no seq annotation yet (the first write): JSON patch cannot test that a member is absent, so the
  patch ``test``s ``/metadata/resourceVersion`` -- the whole object is unchanged since it was
  read, hence the annotation is still absent -- then ``add``s the annotations (and
  ``/metadata/annotations`` itself when the object has none). Two first writers: one wins, the
  other's ``test`` fails and its re-read sees the winner's seq.

Refusals name a code (`RefusalCode`) and a detail; `Refusal.reason` is ``"<code>: <detail>"``,
which is what the Actuation record, the Event and the status carry.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import msgspec

from governor.events import Reason, ScaleDecision
from governor.spec import ScalingPolicy, TargetRef
from governor.targets import escape_pointer, kind_of
from governor.targets import to_pointer as to_pointer  # re-exported: the actuator's callers
from governor.targets.base import TaskReplicas, Tasks, dig, pointer_segments

# Every annotation governor writes on a target starts with it (explain lists them).
ANNOTATION_PREFIX = "governor.dev/"
ANN_SEQ = "governor.dev/decision-seq"
ANN_ID = "governor.dev/decision-id"
ANN_REASON = "governor.dev/decision-reason"
# sha256 of the decision's canonical JSON (first 16 hex digits): tells a replay of the applied
# decision (same seq, same body: stale) from another decision with the same seq (seq_conflict).
ANN_DIGEST = "governor.dev/decision-digest"
ANN_PAUSED = "governor.dev/paused"

# Longest reason kept in the annotation and the Event message.
MAX_REASON_CHARS = 400

RefusalCode = Literal[
    "stale",  # seq older than (or a replay of) the one applied on the target
    "seq_conflict",  # same seq as the one applied, different decision body
    "invalid_decision",  # malformed: bad workload id, seq < 1, negative replicas, ...
    "namespace_not_allowed",  # the workload's namespace is not in the actuator's allowed list
    "kind_not_allowed",  # the target's kind is not in the actuator's allowed list
    "no_policy",  # no ScalingPolicy for this workload on the API server
    "invalid_policy",  # the ScalingPolicy on the API server does not validate
    "policy_mismatch",  # the decision's target or policy disagrees with the ScalingPolicy
    "below_min",  # to_replicas < minReplicas
    "above_max",  # to_replicas > maxReplicas (or replicaCap)
    "paused",  # governor.dev/paused: "true" on the target or the ScalingPolicy
    "owned_by_hpa",  # an autoscaling/v2 HPA scales the same target
    "owned_by_keda",  # a KEDA ScaledObject scales the same target
    "target_not_found",  # the target object does not exist
    "task_not_found",  # a Volcano Job without the policy's task
    "volcano_constraint",  # the change would break Volcano's minAvailable rules
    "fence_corrupt",  # the seq annotation on the target is not an integer
]

# Refusals that are the normal result of at-least-once delivery: no Event, no status change.
QUIET_REFUSALS: frozenset[str] = frozenset({"stale"})


class Refusal(msgspec.Struct, frozen=True):
    code: RefusalCode
    detail: str

    @property
    def reason(self) -> str:
        return f"{self.code}: {self.detail}"


# --- identities -------------------------------------------------------------------------------


class WorkloadId(msgspec.Struct, frozen=True):
    namespace: str
    kind: str
    name: str


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_KIND = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")


def parse_workload(workload: str) -> WorkloadId | None:
    """`namespace/kind/name` -> WorkloadId, or None when it is not one."""
    parts = workload.split("/")
    if len(parts) != 3:
        return None
    ns, kind, name = parts
    if not _DNS_LABEL.match(ns) or not _KIND.match(kind) or not name or len(name) > 253:
        return None
    return WorkloadId(ns, kind, name)


def api_group(api_version: str) -> str:
    """`apps/v1` -> `apps`; `v1` -> `` (the core group)."""
    return api_version.rpartition("/")[0]


def kind_key(kind: str, api_version: str) -> str:
    """The spelling of a kind in the allowed-kinds list: `Kind.group` (`Kind` for core)."""
    group = api_group(api_version)
    return f"{kind}.{group}" if group else kind


def decision_digest(decision: ScaleDecision) -> str:
    """A stable fingerprint of the whole decision: canonical JSON (keys sorted) of the decision as
    it reads back from the wire, so `42` and `42.0` in a float field hash the same."""
    wire = msgspec.json.decode(msgspec.json.encode(decision), type=ScaleDecision)
    raw = msgspec.json.encode(wire, order="sorted")
    return hashlib.sha256(raw).hexdigest()[:16]


def reason_text(reasons: Sequence[Reason], limit: int = MAX_REASON_CHARS) -> str:
    """A decision's reasons in one line: `max: capped at 10; metric(cpu=0.93): ...`."""
    parts = []
    for r in reasons:
        head: str = r.rule
        if r.metric is not None:
            value = "" if r.value is None else f"={r.value:g}"
            head = f"{r.rule}({r.metric}{value})"
        elif r.value is not None:
            head = f"{r.rule}({r.value:g})"
        parts.append(f"{head}: {r.detail}" if r.detail else head)
    text = "; ".join(parts) or "unspecified"
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- actuator rules (config) ------------------------------------------------------------------


class ActuatorRules(msgspec.Struct, frozen=True, kw_only=True):
    """What the actuator's operator allows, whatever the messages say.

    `allowed_namespaces`: namespaces the actuator may write to; `"*"` allows every namespace
    (then RBAC is the only fence). `allowed_kinds`: `Kind.group` entries (`Deployment.apps`,
    `Job.batch.volcano.sh`, `PyTorchJob.kubeflow.org`).
    """

    allowed_namespaces: frozenset[str]
    allowed_kinds: frozenset[str] = frozenset(
        {
            "Deployment.apps",
            "StatefulSet.apps",
            "Job.batch.volcano.sh",
            "PyTorchJob.kubeflow.org",
        }
    )

    def namespace_allowed(self, namespace: str) -> bool:
        return "*" in self.allowed_namespaces or namespace in self.allowed_namespaces

    def kind_allowed(self, kind: str, api_version: str) -> bool:
        return kind_key(kind, api_version) in self.allowed_kinds


def precheck(decision: ScaleDecision, rules: ActuatorRules) -> Refusal | None:
    """What can be refused from the message alone, before any API call: a malformed decision
    or a namespace outside the allowed list (the actuator has no RBAC there anyway)."""
    wid = parse_workload(decision.workload)
    if wid is None:
        return Refusal("invalid_decision", f"workload {decision.workload!r} is not ns/kind/name")
    if decision.seq < 1:
        return Refusal("invalid_decision", f"seq must be >= 1, got {decision.seq}")
    if decision.to_replicas < 0:
        return Refusal("invalid_decision", f"to_replicas must be >= 0, got {decision.to_replicas}")
    if decision.min_available is not None and decision.min_available < 0:
        return Refusal(
            "invalid_decision", f"min_available must be >= 0, got {decision.min_available}"
        )
    if not rules.namespace_allowed(wid.namespace):
        return Refusal(
            "namespace_not_allowed",
            f"namespace {wid.namespace!r} is not in the actuator's allowed namespaces",
        )
    if decision.policy:
        ns, _, name = decision.policy.partition("/")
        if not name or ns != wid.namespace:
            return Refusal(
                "policy_mismatch",
                f"policy {decision.policy!r} is not a namespace/name in {wid.namespace!r}",
            )
    return None


def upper_bound(policy: ScalingPolicy) -> int:
    spec = policy.spec
    cap = spec.replica_cap if spec.replica_cap is not None else spec.max_replicas
    return min(spec.max_replicas, cap)


def admit(
    decision: ScaleDecision, policy: ScalingPolicy | None, rules: ActuatorRules
) -> Refusal | None:
    """Check a decision against the actuator's rules and the ScalingPolicy as the API server has
    it (never the message's idea of the policy). None: the decision may go on to `plan`."""
    early = precheck(decision, rules)
    if early is not None:
        return early
    if policy is None:
        return Refusal("no_policy", f"no ScalingPolicy targets {decision.workload}")
    ref = policy.spec.target_ref
    if policy.workload != decision.workload:
        return Refusal(
            "policy_mismatch",
            f"ScalingPolicy {policy.key} targets {policy.workload}, not {decision.workload}",
        )
    if decision.target is not None and (
        decision.target.kind != ref.kind
        or decision.target.name != ref.name
        or api_group(decision.target.api_version) != api_group(ref.api_version)
    ):
        return Refusal(
            "policy_mismatch",
            f"decision target {kind_key(decision.target.kind, decision.target.api_version)}/"
            f"{decision.target.name} differs from ScalingPolicy {policy.key}'s "
            f"{kind_key(ref.kind, ref.api_version)}/{ref.name}",
        )
    if not rules.kind_allowed(ref.kind, ref.api_version):
        return Refusal(
            "kind_not_allowed",
            f"{kind_key(ref.kind, ref.api_version)} is not in the actuator's allowed kinds",
        )
    if policy.metadata.annotations.get(ANN_PAUSED) == "true":
        return Refusal("paused", f'ScalingPolicy {policy.key} has {ANN_PAUSED}: "true"')
    low, high = policy.spec.min_replicas, upper_bound(policy)
    if decision.to_replicas < low:
        return Refusal(
            "below_min", f"to_replicas {decision.to_replicas} < minReplicas {low} ({policy.key})"
        )
    if decision.to_replicas > high:
        what = "maxReplicas" if high == policy.spec.max_replicas else "replicaCap"
        return Refusal(
            "above_max", f"to_replicas {decision.to_replicas} > {what} {high} ({policy.key})"
        )
    if decision.min_available is not None and not kind_of(ref).moves_min_available(ref):
        return Refusal(
            "policy_mismatch",
            f"decision sets min_available but ScalingPolicy {policy.key} does not move "
            "minAvailable (targetRef.scaleMinAvailable on a Volcano Job)",
        )
    return None


# --- the target as read ------------------------------------------------------------------------


class TargetState(msgspec.Struct, frozen=True, kw_only=True):
    """What the actuator read of the target object (pure data, built by `read_target`)."""

    namespace: str
    name: str
    resource_version: str
    annotations: dict[str, str] | None  # None: the object has no annotations map at all
    replicas_pointer: str  # JSON pointer of the replicas the decision sets
    replicas: int | None  # its current value (None: absent)
    # A kind with tasks only (`TargetKind.tasks`):
    task_index: int | None = None
    tasks: tuple[TaskReplicas, ...] = ()
    min_available: int | None = None


def resolve_pointer(obj: Any, pointer: str) -> Any:
    """The value at `pointer` in `obj`, or None when any step is missing."""
    return dig(obj, pointer_segments(pointer))


def _as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_target(
    obj: Mapping[str, Any], ref: TargetRef, replicas_pointer: str | None = None
) -> TargetState | Refusal:
    """The decision-relevant parts of a target object.

    `replicas_pointer`: for Deployment/StatefulSet `/spec/replicas` (the default); for a scalable
    CRD its scale subresource's specReplicasPath as a pointer; ignored for a kind with tasks (a
    Volcano Job), whose kind finds the pointer of the task `ref.task` in the object.
    """
    meta = obj.get("metadata") or {}
    raw_ann = meta.get("annotations")
    annotations = {str(k): str(v) for k, v in raw_ann.items()} if raw_ann is not None else None
    namespace = str(meta.get("namespace", ""))
    name = str(meta.get("name", ""))
    rv = str(meta.get("resourceVersion", ""))
    found = kind_of(ref).tasks(ref, obj)
    if isinstance(found, str):
        return Refusal("task_not_found", found)
    if found is not None:
        return TargetState(
            namespace=namespace,
            name=name,
            resource_version=rv,
            annotations=annotations,
            replicas_pointer=found.pointer,
            replicas=found.tasks[found.index].replicas,
            task_index=found.index,
            tasks=found.tasks,
            min_available=found.min_available,
        )
    pointer = replicas_pointer or "/spec/replicas"
    return TargetState(
        namespace=namespace,
        name=name,
        resource_version=rv,
        annotations=annotations,
        replicas_pointer=pointer,
        replicas=_as_int(resolve_pointer(obj, pointer)),
    )


# --- ownership --------------------------------------------------------------------------------


def _ref_matches(
    scale_ref: Mapping[str, Any] | None, ref: TargetRef, default_kind: str | None = None
) -> bool:
    if not scale_ref:
        return False
    kind = scale_ref.get("kind") or default_kind
    if kind != ref.kind or scale_ref.get("name") != ref.name:
        return False
    other = scale_ref.get("apiVersion")
    if other is None:
        # KEDA defaults to apps/v1; an HPA's apiVersion is required but be lenient.
        return api_group(ref.api_version) == "apps"
    return api_group(str(other)) == api_group(ref.api_version)


def other_owners(
    ref: TargetRef, hpas: Sequence[Mapping[str, Any]], scaled_objects: Sequence[Mapping[str, Any]]
) -> Refusal | None:
    """A refusal when an HPA or a KEDA ScaledObject in the namespace scales the same target."""
    for so in scaled_objects:
        if _ref_matches((so.get("spec") or {}).get("scaleTargetRef"), ref, "Deployment"):
            name = (so.get("metadata") or {}).get("name", "?")
            return Refusal(
                "owned_by_keda", f"KEDA ScaledObject {name} also scales {ref.kind}/{ref.name}"
            )
    for hpa in hpas:
        if _ref_matches((hpa.get("spec") or {}).get("scaleTargetRef"), ref):
            name = (hpa.get("metadata") or {}).get("name", "?")
            return Refusal(
                "owned_by_hpa",
                f"HorizontalPodAutoscaler {name} also scales {ref.kind}/{ref.name}",
            )
    return None


# --- the plan ---------------------------------------------------------------------------------


class Plan(msgspec.Struct, frozen=True, kw_only=True):
    """A fenced JSON patch for one decision."""

    patch: list[dict[str, Any]]
    from_replicas: int | None
    to_replicas: int
    min_available: (
        int | None
    )  # the object's new minAvailable (a kind with tasks), None when untouched
    changes_replicas: bool  # False: only the fence and the reason annotations move


def applied_seq(annotations: Mapping[str, str] | None) -> int | Refusal:
    """The seq stored on the target (0 when none yet)."""
    raw = (annotations or {}).get(ANN_SEQ)
    if raw is None:
        return 0
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        return Refusal("fence_corrupt", f"{ANN_SEQ} is {raw!r}, not a non-negative integer")
    return value


def is_replay(decision: ScaleDecision, annotations: Mapping[str, str] | None, digest: str) -> bool:
    """The target's fence holds this very decision (its seq and its digest): it was applied."""
    stored = (annotations or {}).get(ANN_DIGEST)
    return applied_seq(annotations) == decision.seq and stored == digest


def check_fence(
    decision: ScaleDecision, annotations: Mapping[str, str] | None, digest: str
) -> Refusal | None:
    """Stale, replayed or conflicting seq -> a refusal; None when the decision is newer."""
    current = applied_seq(annotations)
    if isinstance(current, Refusal):
        return current
    if decision.seq < current:
        return Refusal("stale", f"seq {decision.seq} < applied seq {current}")
    if decision.seq == current:
        if is_replay(decision, annotations, digest):
            return Refusal("stale", f"seq {decision.seq} already applied (replay)")
        return Refusal(
            "seq_conflict",
            f"seq {decision.seq} was applied with another decision "
            f"({(annotations or {}).get(ANN_ID, '?')}); this one differs",
        )
    return None


def _ann_op(key: str, value: str) -> dict[str, Any]:
    # `add` on an existing object member replaces it (RFC 6902 4.1).
    return {"op": "add", "path": f"/metadata/annotations/{escape_pointer(key)}", "value": value}


def plan(
    decision: ScaleDecision,
    policy: ScalingPolicy,
    target: TargetState,
    *,
    digest: str | None = None,
) -> Plan | Refusal:
    """The fenced JSON patch for an admitted decision, or why it must not be applied.

    Call after `admit` and `other_owners`; `target` must be freshly read (after a failed `test`,
    read it again and call `plan` again).
    """
    digest = digest or decision_digest(decision)
    ann = target.annotations
    if (ann or {}).get(ANN_PAUSED) == "true":
        return Refusal("paused", f'target has {ANN_PAUSED}: "true"')
    fence = check_fence(decision, ann, digest)
    if fence is not None:
        return fence
    ref = policy.spec.target_ref
    ops: list[dict[str, Any]] = []
    if ann is not None and ANN_SEQ in ann:
        ops.append(
            {
                "op": "test",
                "path": f"/metadata/annotations/{escape_pointer(ANN_SEQ)}",
                "value": ann[ANN_SEQ],
            }
        )
    else:
        ops.append(
            {"op": "test", "path": "/metadata/resourceVersion", "value": target.resource_version}
        )
        if ann is None:
            ops.append({"op": "add", "path": "/metadata/annotations", "value": {}})
    new_min: int | None = None
    if target.task_index is not None:
        i = target.task_index
        ops.append({"op": "test", "path": f"/spec/tasks/{i}/name", "value": target.tasks[i].name})
        new_total = sum(
            decision.to_replicas if j == i else (t.replicas or 0)
            for j, t in enumerate(target.tasks)
        )
        tasks = Tasks(i, target.tasks, target.min_available, target.replicas_pointer)
        moved = kind_of(ref).min_available(
            ref, tasks, decision.to_replicas, decision.min_available, new_total
        )
        if isinstance(moved, str):
            return Refusal("volcano_constraint", moved)
        new_min = moved
    changes = target.replicas != decision.to_replicas
    if changes:
        op = "replace" if target.replicas is not None else "add"
        ops.append({"op": op, "path": target.replicas_pointer, "value": decision.to_replicas})
    if new_min is not None:
        ops.append({"op": "add", "path": "/spec/minAvailable", "value": new_min})
        changes = True
    ops += [
        _ann_op(ANN_SEQ, str(decision.seq)),
        _ann_op(ANN_ID, decision.decision_id),
        _ann_op(ANN_REASON, reason_text(decision.reasons)),
        _ann_op(ANN_DIGEST, digest),
    ]
    return Plan(
        patch=ops,
        from_replicas=target.replicas,
        to_replicas=decision.to_replicas,
        min_available=new_min,
        changes_replicas=changes,
    )
