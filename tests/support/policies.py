"""ScalingPolicy objects for the tests: the CRD envelope and the usual metric written once, so
that each test spells out only the spec fields it is about."""

from __future__ import annotations

import time
from typing import Any

from governor import events
from governor.spec import policy_from_obj


def average_metric(name: str = "rps", average: float = 10, **extra: Any) -> dict[str, Any]:
    """A metric aiming at `average` per replica; `extra` adds fields such as its `source`."""
    return {"name": name, "target": {"type": "AverageValue", "averageValue": average}, **extra}


def scaling_policy_obj(
    ns: str, name: str, *, metadata: dict[str, Any] | None = None, **spec: Any
) -> dict[str, Any]:
    """The ScalingPolicy `name` in `ns` with `spec` as given (camelCase keys, as in the CRD);
    its targetRef is the Deployment of the same name unless `spec` names another."""
    return {
        "apiVersion": "governor.dev/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": {"name": name, "namespace": ns, **(metadata or {})},
        "spec": {"targetRef": {"kind": "Deployment", "name": name}, **spec},
    }


def policy_record(obj: dict[str, Any]) -> events.PolicyRecord:
    """`obj` as the policy follower publishes it, stamped now."""
    return events.PolicyRecord(policy=policy_from_obj(obj), published_at=time.time())
