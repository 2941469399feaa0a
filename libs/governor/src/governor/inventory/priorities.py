"""ScalingPolicies from the cluster and the priority a policy gets (spec or PriorityClass)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from governor.events import (
    PolicyRecord,
)
from governor.inventory.names import PRIORITY_FROM_ANNOTATION
from governor.inventory.objects import PriorityClass
from governor.spec import ScalingPolicy, policy_from_obj

if TYPE_CHECKING:  # governor.targets reads objects with this package's models
    from governor.targets import TargetView


def policy_from_cluster(obj: Mapping[str, Any]) -> ScalingPolicy:
    """A ScalingPolicy object from the API server, validated (raises `PolicyError`).

    The resourceVersion is dropped: it moves with every status write, which is not a change of
    the policy (its generation is).
    """
    policy = policy_from_obj(obj)
    return msgspec.structs.replace(
        policy, metadata=msgspec.structs.replace(policy.metadata, resource_version=None)
    )


def priority_is_set(obj: Mapping[str, Any]) -> bool:
    spec = obj.get("spec")
    return isinstance(spec, Mapping) and spec.get("priority") is not None


def resolve_priority(
    policy: ScalingPolicy,
    explicit: bool,
    class_name: str,
    classes: Mapping[str, PriorityClass],
) -> ScalingPolicy:
    """Fill an unset `spec.priority` from the target's PriorityClass (see the module doc)."""
    if explicit:
        return policy
    chosen = classes.get(class_name) if class_name else None
    if chosen is None and not class_name:
        defaults = sorted(
            (c for c in classes.values() if c.global_default), key=lambda c: c.metadata.name
        )
        chosen = defaults[0] if defaults else None
    if chosen is None:
        return policy
    annotations = dict(policy.metadata.annotations)
    annotations[PRIORITY_FROM_ANNOTATION] = f"PriorityClass/{chosen.metadata.name}"
    return msgspec.structs.replace(
        policy,
        spec=msgspec.structs.replace(policy.spec, priority=chosen.value),
        metadata=msgspec.structs.replace(policy.metadata, annotations=annotations),
    )


def policy_record(
    obj: Mapping[str, Any],
    view: TargetView | None,
    classes: Mapping[str, PriorityClass],
    now: float = 0.0,
) -> PolicyRecord:
    """The policies-topic record of a ScalingPolicy object (raises `PolicyError` if invalid)."""
    policy = policy_from_cluster(obj)
    class_name = view.priority_class if view is not None else ""
    policy = resolve_priority(policy, priority_is_set(obj), class_name, classes)
    return PolicyRecord(policy=policy, published_at=now, origin="cluster")
