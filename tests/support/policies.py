"""ScalingPolicy objects for the unit and integration tests: the CRD envelope and the usual
metric written once, so that each test spells out only the spec fields it is about."""

from __future__ import annotations

import time
from typing import Any

from governor import events
from governor.spec import ScalingPolicy, policy_from_obj


def average_metric(name: str = "rps", average: float = 10, **extra: Any) -> dict[str, Any]:
    """A metric aiming at `average` per replica; `extra` adds fields such as its `source`."""
    return {"name": name, "target": {"type": "AverageValue", "averageValue": average}, **extra}


def policy_obj(name: str, namespace: str, spec: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    """The object `namespace/name` around `spec`; `metadata` adds fields such as resourceVersion."""
    return {
        "apiVersion": "governor.dev/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": {"name": name, "namespace": namespace, **metadata},
        "spec": spec,
    }


def scaling_policy(
    name: str, namespace: str, spec: dict[str, Any], **metadata: Any
) -> ScalingPolicy:
    """`policy_obj` as the decider sees it."""
    return policy_from_obj(policy_obj(name, namespace, spec, **metadata))


def scaling_policy_obj(
    ns: str, name: str, *, metadata: dict[str, Any] | None = None, **spec: Any
) -> dict[str, Any]:
    """The ScalingPolicy `name` in `ns` with `spec` as given (camelCase keys, as in the CRD);
    its targetRef is the Deployment of the same name unless `spec` names another."""
    spec = {"targetRef": {"kind": "Deployment", "name": name}, **spec}
    return policy_obj(name, ns, spec, **(metadata or {}))


def policy_record(obj: dict[str, Any]) -> events.PolicyRecord:
    """`obj` as the policy follower publishes it, stamped now."""
    return events.PolicyRecord(policy=policy_from_obj(obj), published_at=time.time())
