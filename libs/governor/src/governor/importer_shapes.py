"""The shapes of the fields the importer reads, checked before it reads them.

msgspec Structs with every field optional and unknown fields allowed (the accounting in
importer_fields names those): they only say what each field the converters use must be — an
object, a list, a string, an integer — so a wrong type is refused with its path ("spec.metrics[1]
.resource.target.averageUtilization: expected int, got str"), as the API server would refuse it,
instead of surfacing as a crash deep inside a converter.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

import msgspec

from governor.importer_result import ConversionError

Number = int | float | str  # a quantity: 100, 0.5, "500m"
T = TypeVar("T")


class _Loose(msgspec.Struct, forbid_unknown_fields=False):
    pass


class Meta(_Loose):
    name: str | None = None
    namespace: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class Ref(_Loose):
    apiVersion: str | None = None
    kind: str | None = None
    name: str | None = None
    envSourceContainerName: str | None = None


class Expression(_Loose):
    key: str | None = None
    operator: str | None = None
    values: list[str] | None = None


class Selector(_Loose):
    matchLabels: dict[str, str] | None = None
    matchExpressions: list[Expression] | None = None


class Target(_Loose):
    type: str | None = None
    value: Number | None = None
    averageValue: Number | None = None
    averageUtilization: int | float | None = None


class MetricId(_Loose):
    name: str | None = None
    selector: Selector | None = None


class MetricBody(_Loose):
    name: str | None = None
    container: str | None = None
    target: Target | None = None
    metric: MetricId | None = None
    describedObject: Ref | None = None


class Metric(_Loose):
    type: str | None = None
    resource: MetricBody | None = None
    containerResource: MetricBody | None = None
    pods: MetricBody | None = None
    object: MetricBody | None = None
    external: MetricBody | None = None


class HpaSpec(_Loose):
    scaleTargetRef: Ref | None = None
    minReplicas: int | None = None
    maxReplicas: int | None = None
    metrics: list[Metric] | None = None
    behavior: dict[str, Any] | None = None


class Hpa(_Loose):
    metadata: Meta | None = None
    spec: HpaSpec | None = None


class HpaOldSpec(_Loose):
    """v1 and v2beta1: what their conversion to v2 reads."""

    metrics: list[dict[str, Any]] | None = None
    targetCPUUtilizationPercentage: int | None = None


class HpaOld(_Loose):
    metadata: Meta | None = None
    spec: HpaOldSpec | None = None


class AuthRef(_Loose):
    name: str | None = None
    kind: str | None = None


class Trigger(_Loose):
    type: str | None = None
    name: str | None = None
    metadata: dict[str, str | int | float | bool] | None = None
    authenticationRef: AuthRef | None = None
    metricType: str | None = None
    useCachedMetrics: bool | None = None


class Fallback(_Loose):
    failureThreshold: int | None = None
    replicas: int | None = None
    behavior: str | None = None


class HpaConfig(_Loose):
    name: str | None = None
    behavior: dict[str, Any] | None = None


class Modifiers(_Loose):
    formula: str | None = None
    target: Number | None = None
    activationTarget: Number | None = None
    metricType: str | None = None


class Advanced(_Loose):
    horizontalPodAutoscalerConfig: HpaConfig | None = None
    restoreToOriginalReplicaCount: bool | None = None
    scalingModifiers: Modifiers | None = None


class ScaledObjectSpec(_Loose):
    scaleTargetRef: Ref | None = None
    pollingInterval: int | None = None
    initialCooldownPeriod: int | None = None
    cooldownPeriod: int | None = None
    idleReplicaCount: int | None = None
    minReplicaCount: int | None = None
    maxReplicaCount: int | None = None
    advanced: Advanced | None = None
    triggers: list[Trigger] | None = None
    fallback: Fallback | None = None


class ScaledObject(_Loose):
    metadata: Meta | None = None
    spec: ScaledObjectSpec | None = None


def check(obj: Any, shape: type[T]) -> None:
    """ConversionError naming the field when `obj` does not have `shape`."""
    try:
        msgspec.convert(obj, shape, str_keys=True)
    except msgspec.ValidationError as err:
        text = str(err)
        problem, _, at = text.rpartition(" - at `")
        path = at.rstrip("`").removeprefix("$").removeprefix(".") or "the object"
        problem = re.sub(r"`([^`]*)`", r"\1", problem or text).replace("Expected", "expected")
        problem = problem.replace(" | null", "")  # every field may be absent: not the point
        raise ConversionError(f"{path}: {problem}") from None
