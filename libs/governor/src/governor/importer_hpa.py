"""HorizontalPodAutoscaler -> ScalingPolicy, for every version the API server serves.

autoscaling/v2beta2 has v2's schema; v2beta1 and v1 are first converted to v2 the way the API
server converts them (pkg/apis/autoscaling/{v2beta1,v1}/conversion.go): v2beta1's flat targets
(`targetAverageUtilization`, `targetAverageValue`, `targetValue`, `metricName`) become v2's
`metric` and `target`; v1's `targetCPUUtilizationPercentage` becomes a cpu Utilization metric
after the metrics the API server keeps in the `autoscaling.alpha.kubernetes.io/metrics`
annotation, and its behavior comes from `autoscaling.alpha.kubernetes.io/behavior`.

What the API server would reject is refused with its reason (field path and message); every
field is converted or named in a note (importer_fields.HPA_FIELDS).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from governor.importer_fields import HPA_FIELDS, HPA_V1_ANNOTATIONS, account
from governor.importer_result import Conversion, ConversionError, finish, meta, number
from governor.importer_shapes import Hpa, HpaOld, check

V2 = ("autoscaling/v2", "autoscaling/v2beta2")
SERVED = (*V2, "autoscaling/v2beta1", "autoscaling/v1")
METRICS_ANNOTATION = "autoscaling.alpha.kubernetes.io/metrics"
BEHAVIOR_ANNOTATION = "autoscaling.alpha.kubernetes.io/behavior"

# --- v2beta1 and v1 -> v2 ---------------------------------------------------------------------


def _v2beta1_target(body: Mapping[str, Any], value: str, average: str) -> dict[str, Any]:
    if body.get(average) is not None:
        return {"type": "AverageValue", "averageValue": body[average]}
    return {"type": "Value", "value": body.get(value)}


def _rest(body: Mapping[str, Any], known: set[str]) -> dict[str, Any]:
    """Fields the conversion does not know: passed on, so the accounting names them."""
    return {k: v for k, v in body.items() if k not in known}


def _metric_id(body: Mapping[str, Any], selector: str) -> dict[str, Any]:
    """v2's metric identifier from v2beta1's `metricName` and the selector field `selector`
    names (External calls it metricSelector); unset ones are left out."""
    metric = {"name": body.get("metricName"), "selector": body.get(selector)}
    return {k: v for k, v in metric.items() if v is not None}


def _metric_v2beta1_to_v2(m: Mapping[str, Any]) -> dict[str, Any]:
    kind = m.get("type")
    key = str(kind)[:1].lower() + str(kind)[1:]
    if not isinstance(m.get(key), Mapping | None):
        return dict(m)  # not an object: the v2 shape check names it
    if kind in ("Resource", "ContainerResource"):
        key = kind[0].lower() + kind[1:]
        body = m.get(key) or {}
        if body.get("targetAverageUtilization") is not None:
            target = {"type": "Utilization", "averageUtilization": body["targetAverageUtilization"]}
        else:
            target = {"type": "AverageValue", "averageValue": body.get("targetAverageValue")}
        known = {"name", "container", "targetAverageUtilization", "targetAverageValue"}
        out = {"name": body.get("name"), "target": target, **_rest(body, known)}
        if "container" in body:
            out["container"] = body["container"]
        return {"type": kind, key: out}
    if kind == "Pods":
        body = m.get("pods") or {}
        return {
            "type": kind,
            "pods": {
                "metric": _metric_id(body, "selector"),
                "target": {"type": "AverageValue", "averageValue": body.get("targetAverageValue")},
                **_rest(body, {"metricName", "selector", "targetAverageValue"}),
            },
        }
    if kind == "Object":
        body = m.get("object") or {}
        return {
            "type": kind,
            "object": {
                "describedObject": body.get("target"),
                "metric": _metric_id(body, "selector"),
                "target": _v2beta1_target(body, "targetValue", "averageValue"),
                **_rest(body, {"target", "metricName", "selector", "targetValue", "averageValue"}),
            },
        }
    if kind == "External":
        body = m.get("external") or {}
        known = {"metricName", "metricSelector", "targetValue", "targetAverageValue"}
        return {
            "type": kind,
            "external": {
                "metric": _metric_id(body, "metricSelector"),
                "target": _v2beta1_target(body, "targetValue", "targetAverageValue"),
                **_rest(body, known),
            },
        }
    return dict(m)


def _annotation_json(value: Any, key: str) -> Any:
    try:
        return json.loads(value)
    except (TypeError, ValueError) as err:
        raise ConversionError(f"metadata.annotations[{key}]: not valid JSON ({err})") from None


def to_v2(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object in autoscaling/v2 form, as the API server would serve it."""
    api = obj.get("apiVersion")
    out = {**obj, "apiVersion": "autoscaling/v2"}
    if api in V2:
        return out
    md = dict(obj.get("metadata") or {})
    annotations = dict(md.get("annotations") or {})
    spec = dict(obj.get("spec") or {})
    if api == "autoscaling/v2beta1":
        spec["metrics"] = [_metric_v2beta1_to_v2(m) for m in spec.get("metrics") or []]
    else:  # autoscaling/v1
        metrics = []
        if METRICS_ANNOTATION in annotations:
            listed = _annotation_json(annotations.pop(METRICS_ANNOTATION), METRICS_ANNOTATION)
            metrics = [_metric_v2beta1_to_v2(m) for m in listed or []]
        cpu = spec.pop("targetCPUUtilizationPercentage", None)
        if cpu is not None:
            metrics.append(
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": cpu},
                    },
                }
            )
        if metrics:
            spec["metrics"] = metrics
    if BEHAVIOR_ANNOTATION in annotations:
        spec["behavior"] = _annotation_json(
            annotations.pop(BEHAVIOR_ANNOTATION), BEHAVIOR_ANNOTATION
        )
    if annotations:
        md["annotations"] = annotations
    else:
        md.pop("annotations", None)
    out["metadata"] = md
    out["spec"] = spec
    return out


# --- v2 -> ScalingPolicy ----------------------------------------------------------------------


def selector_text(selector: Any, where: str) -> str:
    """A LabelSelector as label-selector text, sorted so the same selector gives the same
    text: {matchLabels: {b: 2, a: 1}} -> "a=1,b=2"."""
    if selector is None:
        return ""
    if not isinstance(selector, Mapping):
        raise ConversionError(
            f"{where}: Invalid value: {selector!r}: a LabelSelector is an object "
            "({matchLabels: ..., matchExpressions: ...}), as the API server requires"
        )
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for e in selector.get("matchExpressions") or []:
        op, key, values = e.get("operator"), e.get("key"), sorted(e.get("values") or [])
        if op == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            parts.append(str(key))
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
        else:
            raise ConversionError(f"{where}.matchExpressions: Unsupported value: {op!r}")
    return ",".join(sorted(parts))


def metric_name(base: str, labels: list[str]) -> str:
    """`base{label,...}`: the metric, then what tells it apart (container, selector, object),
    in PromQL's notation."""
    labels = [x for x in labels if x]
    return f"{base}{{{','.join(labels)}}}" if labels else base


_ALLOWED_TARGETS = {
    "Resource": ("Utilization", "AverageValue"),
    "ContainerResource": ("Utilization", "AverageValue"),
    "Pods": ("AverageValue",),
    "Object": ("Value", "AverageValue"),
    "External": ("Value", "AverageValue"),
}


def _target(kind: str, target: Mapping[str, Any] | None, where: str) -> dict[str, Any]:
    if not target or not target.get("type"):
        raise ConversionError(f"{where}.type: Required value")
    t = target["type"]
    allowed = _ALLOWED_TARGETS[kind]
    if t not in allowed:
        raise ConversionError(
            f"{where}.type: Unsupported value: {t!r}: supported values: "
            + ", ".join(f'"{a}"' for a in allowed)
        )
    field = {"Utilization": "averageUtilization", "AverageValue": "averageValue", "Value": "value"}[
        t
    ]
    if target.get(field) is None:
        raise ConversionError(f"{where}.{field}: Required value: must set {field} for type {t}")
    value = number(target[field], f"{where}.{field}")
    if value <= 0 and t != "Value":
        raise ConversionError(f"{where}.{field}: Invalid value: {value}: must be greater than 0")
    return {"type": t, field: value}


def _metric(i: int, m: Mapping[str, Any]) -> dict[str, Any] | str:
    """A governor metric, or (a string) why this metric cannot be converted."""
    kind = m.get("type")
    where = f"spec.metrics[{i}]"
    if kind not in _ALLOWED_TARGETS:
        return f"{where}.type: {kind!r} (Resource, ContainerResource, Pods, Object, External)"
    key = str(kind)[0].lower() + str(kind)[1:]
    body = m.get(key)
    if not isinstance(body, Mapping):
        raise ConversionError(
            f"{where}.{key}: Required value: must populate information for {kind}"
        )
    target = _target(str(kind), body.get("target"), f"{where}.{key}.target")
    if kind in ("Resource", "ContainerResource"):
        res = body.get("name")
        if res not in ("cpu", "memory"):
            return f"{where}: resource {res!r}: governor's resource source measures cpu and memory"
        container = body.get("container")
        if kind == "ContainerResource" and not container:
            raise ConversionError(f"{where}.containerResource.container: Required value")
        label = f"container={container}" if container else ""
        return {
            "name": metric_name(str(res), [label]),
            "source": {"type": "resource", "resource": res},
            "target": target,
        }
    metric = body.get("metric") or {}
    if not metric.get("name"):
        raise ConversionError(f"{where}.{key}.metric.name: Required value")
    labels = [selector_text(metric.get("selector"), f"{where}.{key}.metric.selector")]
    if kind == "Object":
        obj = body.get("describedObject") or {}
        if not obj.get("kind") or not obj.get("name"):
            raise ConversionError(f"{where}.object.describedObject: Required value (kind, name)")
        labels.insert(0, f"object={obj['kind']}/{obj['name']}")
    return {
        "name": metric_name(str(metric["name"]), labels),
        "source": {"type": "push"},
        "target": target,
    }


def _default_api(kind: str) -> str:
    """A scaleTargetRef without apiVersion: the group its kind lives in."""
    return "apps/v1" if kind in ("Deployment", "StatefulSet", "ReplicaSet") else "v1"


def _bounds(spec: Mapping[str, Any]) -> tuple[int, int]:
    low = spec.get("minReplicas", 1)
    high = spec.get("maxReplicas")
    if not isinstance(low, int) or low < 1:
        raise ConversionError(
            f"spec.minReplicas: Invalid value: {low!r}: must be greater than or equal to 1 "
            "(0 needs the HPAScaleToZero feature gate; governor's spec.scaleToZero does it: "
            "set minReplicas 0 with scaleToZero after the import)"
        )
    if high is None:
        raise ConversionError("spec.maxReplicas: Required value")
    if not isinstance(high, int) or high < 1:
        raise ConversionError(f"spec.maxReplicas: Invalid value: {high!r}: must be greater than 0")
    if high < low:
        raise ConversionError(
            f"spec.maxReplicas: Invalid value: {high}: must be greater than or equal to "
            "`minReplicas`"
        )
    return low, high


def from_hpa(obj: Mapping[str, Any]) -> Conversion:
    api = obj.get("apiVersion")
    if api not in SERVED:
        raise ConversionError(
            f'no matches for kind "HorizontalPodAutoscaler" in version "{api}" (the API server '
            "serves autoscaling/v2, v2beta2 (until 1.26), v2beta1 (until 1.25) and v1: write it "
            "as autoscaling/v2)"
        )
    if api not in V2:
        check(obj, HpaOld)
    v2 = to_v2(obj)
    check(v2, Hpa)
    spec = v2.get("spec") or {}
    ref = spec.get("scaleTargetRef") or {}
    for field in ("kind", "name"):
        if not ref.get(field):
            raise ConversionError(f"spec.scaleTargetRef.{field}: Required value")
    low, high = _bounds(spec)
    notes: list[str] = []
    unconverted: list[str] = []
    metrics: list[dict[str, Any]] = []
    for i, m in enumerate(spec.get("metrics") or []):
        result = _metric(i, m)
        if isinstance(result, str):
            unconverted.append(result)
        else:
            metrics.append(result)
    if not spec.get("metrics"):
        metrics.append(
            {
                "name": "cpu",
                "source": {"type": "resource", "resource": "cpu"},
                "target": {"type": "Utilization", "averageUtilization": 80},
            }
        )
        notes.append("spec.metrics: none given: HPA's default, cpu averageUtilization 80, was used")
    pol: dict[str, Any] = {
        "targetRef": {
            "apiVersion": ref.get("apiVersion") or _default_api(ref["kind"]),
            "kind": ref["kind"],
            "name": ref["name"],
        },
        "minReplicas": low,
        "maxReplicas": high,
        "metrics": metrics,
    }
    if spec.get("behavior"):
        pol["behavior"] = spec["behavior"]
    notes += account(v2, (*HPA_FIELDS, *HPA_V1_ANNOTATIONS))
    return finish(meta(v2), pol, notes, unconverted)
