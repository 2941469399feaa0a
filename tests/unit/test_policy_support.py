"""Builders shared by the policy tests (no tests here): policies from camelCase dicts, inputs."""

from __future__ import annotations

from typing import Any

import msgspec

from governor.events import WorkloadState
from governor.policy import MetricObservation, ScaleInputs, ScaleResult, ScaleState, evaluate
from governor.spec import ScalingPolicySpec

_TARGET_KEY = {
    "Utilization": "averageUtilization",
    "Value": "value",
    "AverageValue": "averageValue",
}


def metric(name: str, kind: str, target: float, **extra: Any) -> dict[str, Any]:
    return {"name": name, "target": {"type": kind, _TARGET_KEY[kind]: target}, **extra}


def policy(
    *metrics: dict[str, Any],
    min_replicas: int = 1,
    max_replicas: int = 100,
    **extra: Any,
) -> ScalingPolicySpec:
    obj: dict[str, Any] = {
        "targetRef": {"kind": "Deployment", "name": "web"},
        "minReplicas": min_replicas,
        "maxReplicas": max_replicas,
        "metrics": list(metrics) or [metric("load", "AverageValue", 100.0)],
        **extra,
    }
    return msgspec.convert(obj, ScalingPolicySpec)


def rules(
    *policies: tuple[str, int, int], window: int | None = None, select: str | None = None
) -> dict[str, Any]:
    """An HPAScalingRules dict: rules(("Pods", 4, 15), window=0)."""
    out: dict[str, Any] = {}
    if policies:
        out["policies"] = [{"type": t, "value": v, "periodSeconds": p} for t, v, p in policies]
    if window is not None:
        out["stabilizationWindowSeconds"] = window
    if select is not None:
        out["selectPolicy"] = select
    return out


def workload(current: int, ready: int | None = None, at: float = 0.0) -> WorkloadState:
    return WorkloadState(
        workload="default/Deployment/web",
        spec_replicas=current,
        ready_replicas=current if ready is None else ready,
        observed_at=at,
    )


def inputs(
    current: int,
    now: float,
    *,
    ready: int | None = None,
    sample_at: float | None = None,
    **values: float | tuple[float, float] | None,
) -> ScaleInputs:
    """Observations by metric name: a number (stable), (stable, panic), or None (no data)."""
    obs: dict[str, MetricObservation] = {}
    for name, v in values.items():
        if v is None:
            continue
        stable, panic = v if isinstance(v, tuple) else (v, None)
        at = now if sample_at is None else sample_at
        obs[name] = MetricObservation(metric=name, stable=stable, panic=panic, newest_sample=at)
    return ScaleInputs(workload=workload(current, ready, now), observations=obs)


def step(
    spec: ScalingPolicySpec,
    state: ScaleState,
    current: int,
    now: float,
    **kw: Any,
) -> tuple[ScaleResult, ScaleState]:
    return evaluate(spec, inputs(current, now, **kw), state, now)
