"""Coming from HPA or KEDA: convert a HorizontalPodAutoscaler or a ScaledObject to a ScalingPolicy.

Pure: a decoded YAML object in, a validated ScalingPolicy and the list of what could not be
carried over out. Nothing is dropped silently: every field that has no equivalent is named in
`Conversion.notes`, and a trigger or metric that cannot be converted at all is listed in
`Conversion.unconverted` (the policy keeps the others; if none is left, ImportError says so).

HPA (autoscaling/v2):
  scaleTargetRef, minReplicas (default 1), maxReplicas, behavior (verbatim); metrics:
  Resource cpu/memory -> the `resource` source with the same target; External, Pods and Object
  metrics have no source governor can query (they come from a metrics adapter) -> `push` with
  the same target, and a note: publish the metric to governor.metrics or give it a query.
KEDA (keda.sh/v1alpha1 ScaledObject):
  scaleTargetRef, minReplicaCount (default 0 -> scaleToZero with cooldownPeriod and the
  triggers' activation thresholds), maxReplicaCount (default 100), pollingInterval (the sources'
  interval), fallback, advanced.horizontalPodAutoscalerConfig.behavior; triggers: cpu, memory,
  kafka (-> `kafka_lag`, AverageValue lagThreshold: KEDA's ceil(totalLag / lagThreshold)),
  prometheus (-> `prometheus`, AverageValue threshold unless metricType says Value).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from governor.inventory import parse_quantity
from governor.spec import PolicyError, ScalingPolicy, policy_from_obj


class ConversionError(ValueError):
    """The object cannot become a ScalingPolicy; the message says why and what to do."""


class Conversion(msgspec.Struct):
    policy: ScalingPolicy
    notes: list[str]
    unconverted: list[str]


def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    if not meta.get("name"):
        raise ConversionError("metadata.name is missing")
    return {"name": meta["name"], "namespace": meta.get("namespace", "default")}


def _target_ref(ref: Mapping[str, Any] | None, where: str) -> dict[str, Any]:
    if not ref or not ref.get("name"):
        raise ConversionError(f"{where}.name is missing: nothing to scale")
    return {
        "apiVersion": ref.get("apiVersion", "apps/v1"),
        "kind": ref.get("kind", "Deployment"),
        "name": ref["name"],
    }


def _hpa_target(target: Mapping[str, Any]) -> dict[str, Any]:
    kind = target.get("type")
    if kind == "Utilization":
        return {"type": "Utilization", "averageUtilization": target["averageUtilization"]}
    if kind == "AverageValue":
        return {"type": "AverageValue", "averageValue": _number(target["averageValue"])}
    if kind == "Value":
        return {"type": "Value", "value": _number(target["value"])}
    raise ConversionError(f"unknown metric target type {kind!r}")


def _number(q: Any) -> float:
    """A Kubernetes quantity as a number: 100, "100", "500m", "2k", "1Gi"."""
    try:
        return parse_quantity(q)
    except ValueError as err:
        raise ConversionError(f"not a quantity: {q!r} ({err})") from None


def from_hpa(obj: Mapping[str, Any]) -> Conversion:
    spec = obj.get("spec") or {}
    notes: list[str] = []
    unconverted: list[str] = []
    metrics: list[dict[str, Any]] = []
    for i, m in enumerate(spec.get("metrics") or []):
        kind = m.get("type")
        try:
            if kind == "Resource":
                res = m["resource"]
                if res["name"] not in ("cpu", "memory"):
                    unconverted.append(f"metrics[{i}]: resource {res['name']!r} (cpu, memory only)")
                    continue
                metrics.append(
                    {
                        "name": res["name"],
                        "source": {"type": "resource", "resource": res["name"]},
                        "target": _hpa_target(res["target"]),
                    }
                )
            elif kind == "ContainerResource":
                res = m["containerResource"]
                metrics.append(
                    {
                        "name": res["name"],
                        "source": {"type": "resource", "resource": res["name"]},
                        "target": _hpa_target(res["target"]),
                    }
                )
                notes.append(
                    f"metrics[{i}]: ContainerResource of container {res.get('container')!r} "
                    "became the whole pod's usage"
                )
            elif kind in ("External", "Pods", "Object"):
                body = m[kind[0].lower() + kind[1:]]
                name = body["metric"]["name"]
                metrics.append(
                    {
                        "name": name,
                        "source": {"type": "push"},
                        "target": _hpa_target(body["target"]),
                    }
                )
                notes.append(
                    f"metrics[{i}]: {kind} metric {name!r} comes from a metrics adapter governor "
                    "does not query: publish it to governor.metrics (push endpoint or directly) "
                    "or replace the source with a prometheus query"
                )
                if body["metric"].get("selector"):
                    notes.append(f"metrics[{i}]: its selector was not carried over")
            else:
                unconverted.append(f"metrics[{i}]: type {kind!r}")
        except KeyError as err:
            unconverted.append(f"metrics[{i}]: {kind} without {err.args[0]!r}")
    if not spec.get("metrics"):
        metrics.append(
            {
                "name": "cpu",
                "source": {"type": "resource", "resource": "cpu"},
                "target": {"type": "Utilization", "averageUtilization": 80},
            }
        )
        notes.append("no metrics: HPA's default, cpu averageUtilization 80, was used")
    pol: dict[str, Any] = {
        "targetRef": _target_ref(spec.get("scaleTargetRef"), "spec.scaleTargetRef"),
        "minReplicas": spec.get("minReplicas", 1),
        "maxReplicas": spec.get("maxReplicas"),
        "metrics": metrics,
    }
    if spec.get("behavior"):
        pol["behavior"] = spec["behavior"]
    return _finish(obj, pol, notes, unconverted)


def _trigger(i: int, t: Mapping[str, Any], interval: float) -> tuple[dict[str, Any], float, str]:
    """(metric, activation threshold, note) for one KEDA trigger; ConversionError if unsupported."""
    kind = t.get("type")
    md = t.get("metadata") or {}
    name = t.get("name") or f"{kind}-{i}"
    metric_type = t.get("metricType") or md.get("type")
    if kind in ("cpu", "memory"):
        value = _number(md["value"])
        mt = metric_type or "Utilization"
        target = (
            {"type": "Utilization", "averageUtilization": value}
            if mt == "Utilization"
            else {"type": "AverageValue", "averageValue": value}
        )
        return (
            {"name": name, "source": {"type": "resource", "resource": kind}, "target": target},
            0.0,
            "",
        )
    if kind == "kafka":
        threshold = int(md.get("lagThreshold", 10))
        source: dict[str, Any] = {
            "type": "kafka_lag",
            "topic": md["topic"],
            "consumerGroup": md["consumerGroup"],
            "bootstrapServers": md["bootstrapServers"],
            "lagThreshold": threshold,
            "intervalSeconds": interval,
        }
        for key, field in (
            ("activationLagThreshold", "activationLagThreshold"),
            ("offsetResetPolicy", "offsetResetPolicy"),
        ):
            if key in md:
                source[field] = int(md[key]) if key.startswith("activation") else md[key]
        for flag in ("allowIdleConsumers", "excludePersistentLag", "limitToPartitionsWithLag"):
            if flag in md:
                source[flag] = str(md[flag]).lower() == "true"
        note = "" if not t.get("authenticationRef") else f"triggers[{i}]: authenticationRef dropped"
        return (
            {
                "name": name,
                "source": source,
                "target": {"type": "AverageValue", "averageValue": threshold},
            },
            float(md.get("activationLagThreshold", 0)),
            note,
        )
    if kind == "prometheus":
        value = _number(md["threshold"])
        target = (
            {"type": "Value", "value": value}
            if metric_type == "Value"
            else {"type": "AverageValue", "averageValue": value}
        )
        return (
            {
                "name": name,
                "source": {
                    "type": "prometheus",
                    "query": md["query"],
                    "serverAddress": md["serverAddress"],
                    "intervalSeconds": interval,
                },
                "target": target,
            },
            float(md.get("activationThreshold", 0)),
            "" if not t.get("authenticationRef") else f"triggers[{i}]: authenticationRef dropped",
        )
    raise ConversionError(f"triggers[{i}]: KEDA scaler {kind!r} has no governor source")


def from_scaled_object(obj: Mapping[str, Any]) -> Conversion:
    spec = obj.get("spec") or {}
    notes: list[str] = []
    unconverted: list[str] = []
    interval = float(spec.get("pollingInterval", 30))
    metrics: list[dict[str, Any]] = []
    activation = 0.0
    for i, t in enumerate(spec.get("triggers") or []):
        try:
            metric, act, note = _trigger(i, t, interval)
        except ConversionError as err:
            unconverted.append(str(err))
            continue
        except (KeyError, ValueError) as err:
            unconverted.append(f"triggers[{i}] ({t.get('type')}): missing or bad {err}")
            continue
        metrics.append(metric)
        activation = max(activation, act)
        if note:
            notes.append(note)
    min_replicas = int(spec.get("minReplicaCount", 0))
    pol: dict[str, Any] = {
        "targetRef": _target_ref(spec.get("scaleTargetRef"), "spec.scaleTargetRef"),
        "minReplicas": min_replicas,
        "maxReplicas": int(spec.get("maxReplicaCount", 100)),
        "metrics": metrics,
    }
    if min_replicas == 0:
        pol["scaleToZero"] = {
            "activationThreshold": activation,
            "cooldownSeconds": float(spec.get("cooldownPeriod", 300)),
        }
    if "idleReplicaCount" in spec:
        notes.append("idleReplicaCount: governor scales to zero only (KEDA allows only 0 too)")
    fb = spec.get("fallback")
    if fb:
        behavior = fb.get("behavior", "static")
        if behavior == "scalingModifiers":
            notes.append("fallback.behavior scalingModifiers became static")
            behavior = "static"
        pol["fallback"] = {
            "failureThreshold": int(fb["failureThreshold"]),
            "replicas": int(fb["replicas"]),
            "behavior": behavior,
        }
    advanced = spec.get("advanced") or {}
    hpa_cfg = advanced.get("horizontalPodAutoscalerConfig") or {}
    if hpa_cfg.get("behavior"):
        pol["behavior"] = hpa_cfg["behavior"]
    if advanced.get("scalingModifiers"):
        unconverted.append("advanced.scalingModifiers (formula over triggers)")
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    if any(k.startswith("autoscaling.keda.sh/paused") for k in annotations):
        notes.append(
            'KEDA paused annotations: set governor.dev/paused: "true" on the target instead'
        )
    return _finish(obj, pol, notes, unconverted)


def _finish(
    obj: Mapping[str, Any], spec: dict[str, Any], notes: list[str], unconverted: list[str]
) -> Conversion:
    if not spec["metrics"]:
        raise ConversionError(
            "no trigger or metric could be converted: " + "; ".join(unconverted or ["none given"])
        )
    if spec["maxReplicas"] is None:
        raise ConversionError("spec.maxReplicas is missing")
    doc = {
        "apiVersion": "governor.dev/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": _meta(obj),
        "spec": spec,
    }
    try:
        policy = policy_from_obj(doc)
    except PolicyError as err:
        raise ConversionError(f"the converted policy is invalid: {err}") from None
    return Conversion(policy=policy, notes=notes, unconverted=unconverted)


def convert(obj: Mapping[str, Any]) -> Conversion:
    """A HorizontalPodAutoscaler (autoscaling/v2) or a KEDA ScaledObject -> ScalingPolicy."""
    kind, api = obj.get("kind"), str(obj.get("apiVersion", ""))
    if kind == "HorizontalPodAutoscaler":
        if api != "autoscaling/v2":
            raise ConversionError(
                f"HorizontalPodAutoscaler {api}: only autoscaling/v2 is supported"
            )
        return from_hpa(obj)
    if kind == "ScaledObject" and api.startswith("keda.sh/"):
        return from_scaled_object(obj)
    raise ConversionError(
        f"{kind or 'an object without kind'} ({api}): expected an autoscaling/v2 "
        "HorizontalPodAutoscaler or a keda.sh ScaledObject"
    )
