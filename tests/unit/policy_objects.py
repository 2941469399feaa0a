"""ScalingPolicy objects as a user writes them (what `policy_from_obj` and the cluster read), for
the tests that build their own policies."""

from __future__ import annotations

from typing import Any

from governor.spec import ScalingPolicy, policy_from_obj


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
