"""KEDA ScaledObject (keda.sh/v1alpha1) -> ScalingPolicy.

What KEDA's admission webhook would reject is refused with KEDA's message
(apis/keda/v1alpha1/scaledobject_webhook.go, scaledobject_types.go); every field is converted or
named in a note (importer_fields.KEDA_FIELDS, SCALER_FIELDS per trigger). The triggers become
metrics through importer_scalers; a trigger governor has no source for is listed in
`unconverted` and the others are kept (governor follows the highest of its metrics' replica
counts, as the HPA behind KEDA does).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from governor.importer_fields import KEDA_FIELDS, SCALER_FIELDS, Field, account
from governor.importer_result import Conversion, ConversionError, finish, meta, target_ref
from governor.importer_scalers import Auth, Trigger, convert_trigger
from governor.importer_shapes import ScaledObject, check

PAUSED = "governor.dev/paused"
KEDA_PAUSED = "autoscaling.keda.sh/paused"
PAUSE_DIRECTION = {
    "autoscaling.keda.sh/paused-scale-in": "scaleDown",
    "autoscaling.keda.sh/paused-scale-down": "scaleDown",
    "autoscaling.keda.sh/paused-scale-out": "scaleUp",
    "autoscaling.keda.sh/paused-scale-up": "scaleUp",
}


def _keda_bool(value: Any) -> bool:
    """KEDA's getBoolAnnotation: strconv.ParseBool, anything unparsable counts as true."""
    return str(value).strip() not in ("0", "f", "F", "false", "FALSE", "False")


def _int(spec: Mapping[str, Any], key: str, default: int | None) -> int | None:
    value = spec.get(key)
    if value is None:  # absent or null: KEDA's default
        return default
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConversionError(f"spec.{key}: must be an integer, got {value!r}")
    return value


def _bounds(spec: Mapping[str, Any]) -> tuple[int, int, int | None]:
    """(min, max, idle) as KEDA reads them, refused as CheckReplicaCountBoundsAreValid does."""
    low = _int(spec, "minReplicaCount", 0)
    high = _int(spec, "maxReplicaCount", 100)
    idle = _int(spec, "idleReplicaCount", None)
    assert low is not None and high is not None
    if low > high:
        raise ConversionError(f"MinReplicaCount={low} must be less than MaxReplicaCount={high}")
    if idle is not None and idle >= low:
        raise ConversionError(f"IdleReplicaCount={idle} must be less than MinReplicaCount={low}")
    return low, high, idle


def _check_webhook(spec: Mapping[str, Any], triggers: list[Mapping[str, Any]]) -> None:
    """KEDA's webhook checks that need the triggers."""
    types = [str(t.get("type")) for t in triggers]
    if not triggers:
        raise ConversionError("spec.triggers: Required value (a ScaledObject needs a trigger)")
    only_resources = all(t in ("cpu", "memory") for t in types)
    if only_resources and not spec.get("minReplicaCount"):
        raise ConversionError(
            "scaledobject has only cpu/memory triggers AND minReplica is 0 "
            "(scale to zero doesn't work in this case)"
        )
    modifiers = (spec.get("advanced") or {}).get("scalingModifiers") or {}
    if modifiers:
        if not modifiers.get("formula"):
            raise ConversionError("ScalingModifiers.Formula is mandatory")
        if not modifiers.get("target"):
            raise ConversionError("ScalingModifiers.Target is mandatory")
    fallback = spec.get("fallback")
    if fallback:
        if modifiers:
            if modifiers.get("metricType") == "Value":
                raise ConversionError(
                    "when using ScalingModifiers, ScaledObject.Spec.Advanced.ScalingModifiers."
                    "MetricType must be AverageValue to have fallback enabled"
                )
        elif not any(
            str(t.get("type")) not in ("cpu", "memory")
            and (t.get("metricType") or "AverageValue") == "AverageValue"
            for t in triggers
        ):
            raise ConversionError(
                "at least one trigger (that is not cpu or memory) has to have the `AverageValue` "
                "type for the fallback to be enabled"
            )


def _auth(t: Mapping[str, Any], auths: Mapping[str, Auth]) -> Auth | None:
    ref = t.get("authenticationRef")
    if not ref:
        return None
    name = str(ref.get("name"))
    return auths.get(name) or Auth(name=name)


def _trigger_notes(i: int, t: Mapping[str, Any], quiet: list[str]) -> list[str]:
    """Notes for the trigger's metadata fields (per scaler), unknown ones included."""
    kind = str(t.get("type"))
    table = tuple(
        Field(f"metadata.{f.path}", f.governor, f.note) for f in SCALER_FIELDS.get(kind, ())
    )
    body = {"metadata": t.get("metadata") or {}}
    unknown = (
        f"not a parameter of the {kind} scaler that governor knows (nor KEDA, if it is a typo)"
    )
    return [f"spec.triggers[{i}].{n}" for n in account(body, table, quiet=quiet, unknown=unknown)]


def _paused(annotations: Mapping[str, Any], behavior: dict[str, Any]) -> bool:
    for key, direction in PAUSE_DIRECTION.items():
        if key in annotations and _keda_bool(annotations[key]):
            behavior.setdefault(direction, {})["selectPolicy"] = "Disabled"
    return any(
        k in annotations and (k.endswith("paused-replicas") or _keda_bool(annotations[k]))
        for k in (KEDA_PAUSED, "autoscaling.keda.sh/paused-replicas")
    )


def _triggers(
    triggers: list[Any], interval: float, auths: Mapping[str, Auth]
) -> tuple[list[dict[str, Any]], list[float], list[str], list[str], bool]:
    """Each trigger converted: (metrics, activation thresholds, notes, what could not be
    converted, whether an authenticationRef was not carried over)."""
    notes: list[str] = []
    unconverted: list[str] = []
    metrics: list[dict[str, Any]] = []
    activations: list[float] = []
    auth_unhandled = False
    for i, raw in enumerate(triggers):
        t = Trigger(
            index=i,
            type=str(raw.get("type")),
            metadata={str(k): v for k, v in (raw.get("metadata") or {}).items()},
            metric_type=raw.get("metricType"),
            name=raw.get("name"),
            interval=interval,
            auth=_auth(raw, auths),
        )
        try:
            converted = convert_trigger(t)
        except ConversionError as err:
            unconverted.append(str(err))
            continue
        metrics.append(converted.metric)
        activations.append(converted.activation)
        auth_unhandled |= t.auth is not None and not t.auth_handled
        notes += t.notes + _trigger_notes(i, raw, t.quiet)
    return metrics, activations, notes, unconverted, auth_unhandled


def _fallback(fallback: Mapping[str, Any], low: int, high: int, notes: list[str]) -> dict[str, Any]:
    """spec.fallback as governor's fallback; its replicas brought inside min..max (noted)."""
    replicas = int(fallback.get("replicas", 0))
    bounded = min(max(replicas, low), high)
    if bounded != replicas:
        notes.append(
            f"spec.fallback.replicas: {replicas} is outside minReplicas..maxReplicas; the "
            f"HPA would clamp it, governor requires it inside: {bounded}"
        )
    return {
        "failureThreshold": int(fallback.get("failureThreshold", 3)),
        "replicas": bounded,
        "behavior": fallback.get("behavior") or "static",
    }


def from_scaled_object(
    obj: Mapping[str, Any], auths: Mapping[str, Auth] | None = None
) -> Conversion:
    """`auths`: the TriggerAuthentications of the same file, by name."""
    check(obj, ScaledObject)
    spec = obj.get("spec") or {}
    triggers = list(spec.get("triggers") or [])
    low, high, idle = _bounds(spec)
    _check_webhook(spec, triggers)
    interval = float(_int(spec, "pollingInterval", 30) or 30)
    metrics, activations, notes, unconverted, auth_unhandled = _triggers(
        triggers, interval, auths or {}
    )
    pol: dict[str, Any] = {
        "targetRef": target_ref(spec.get("scaleTargetRef"), "spec.scaleTargetRef"),
        "minReplicas": low,
        "maxReplicas": high,
        "metrics": metrics,
    }
    quiet: list[str] = [] if auth_unhandled else ["spec.triggers[].authenticationRef"]
    to_zero = low == 0 or idle == 0
    if idle is not None and (idle != 0 or low <= 1):
        quiet.append("spec.idleReplicaCount")
    if idle is not None and idle != 0:
        notes.append(
            f"spec.idleReplicaCount: {idle}: KEDA only supports 0 (HPA cannot scale below its "
            "minReplicas otherwise): ignored"
        )
        to_zero = low == 0
    if to_zero:
        pol["minReplicas"] = 0
        threshold = max(activations, default=0.0)
        if len(set(activations)) > 1:
            notes.append(
                f"activation: the triggers' activation thresholds differ {sorted(set(activations))}"
                f"; governor has one for the policy: the highest, {threshold}, was used"
            )
        pol["scaleToZero"] = {
            "activationThreshold": threshold,
            "cooldownSeconds": float(_int(spec, "cooldownPeriod", 300) or 0),
        }
        initial = _int(spec, "initialCooldownPeriod", None)
        if initial is not None:
            pol["scaleToZero"]["initialCooldownSeconds"] = float(initial)
            if initial >= pol["scaleToZero"]["cooldownSeconds"]:
                quiet.append("spec.initialCooldownPeriod")
    fallback = spec.get("fallback")
    if fallback:
        pol["fallback"] = _fallback(fallback, pol["minReplicas"], high, notes)
    advanced = spec.get("advanced") or {}
    behavior = copy.deepcopy((advanced.get("horizontalPodAutoscalerConfig") or {}).get("behavior"))
    behavior = dict(behavior or {})
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    paused = _paused(annotations, behavior)
    if behavior:
        pol["behavior"] = behavior
    metadata = meta(obj)
    if paused:
        metadata["annotations"] = {PAUSED: "true"}
    notes += account(obj, KEDA_FIELDS, skip=["spec.triggers[].metadata"], quiet=quiet)
    return finish(metadata, pol, notes, unconverted)
