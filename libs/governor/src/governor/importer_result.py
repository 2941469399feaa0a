"""What a conversion gives back, and the steps every converter ends with."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from governor.inventory import parse_quantity
from governor.spec import PolicyError, ScalingPolicy, policy_from_obj


class ConversionError(ValueError):
    """The object cannot become a ScalingPolicy; the message says why (in KEDA's or the API
    server's words where they would refuse it too) and what to do."""


class Conversion(msgspec.Struct):
    policy: ScalingPolicy
    notes: list[str]
    # Triggers or metrics that could not be converted (the policy keeps the others).
    unconverted: list[str]
    # The input named its namespace (written out even when it is "default"); else none is, so
    # `kubectl apply` puts the policy where it would have put the original.
    namespace_given: bool = True


def number(q: Any, where: str) -> float:
    """A Kubernetes quantity or a KEDA number string as a float: 100, "100", "500m", "1k"."""
    try:
        return parse_quantity(q)
    except (ValueError, TypeError) as err:
        raise ConversionError(f"{where}: not a number or quantity: {q!r} ({err})") from None


def unique_names(metrics: list[dict[str, Any]]) -> None:
    """Names the converter derived stay as they are when unique; identical ones (two triggers
    the same in all but their target) get `#2`, `#3` in order, so the result is stable."""
    seen: dict[str, int] = {}
    for m in metrics:
        n = seen.get(m["name"], 0) + 1
        seen[m["name"]] = n
        if n > 1:
            m["name"] = f"{m['name']}#{n}"


def meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    md = obj.get("metadata") or {}
    if not md.get("name"):
        raise ConversionError("metadata.name is missing")
    out: dict[str, Any] = {"name": md["name"]}
    if md.get("namespace"):
        out["namespace"] = md["namespace"]
    if md.get("labels"):
        out["labels"] = dict(md["labels"])
    return out


def target_ref(ref: Mapping[str, Any] | None, where: str) -> dict[str, Any]:
    if not ref or not ref.get("name"):
        raise ConversionError(f"{where}.name is missing: nothing to scale")
    return {
        "apiVersion": ref.get("apiVersion") or "apps/v1",
        "kind": ref.get("kind") or "Deployment",
        "name": ref["name"],
    }


def finish(
    metadata: dict[str, Any], spec: dict[str, Any], notes: list[str], unconverted: list[str]
) -> Conversion:
    if not spec["metrics"]:
        raise ConversionError(
            "no trigger or metric could be converted: " + "; ".join(unconverted or ["none given"])
        )
    unique_names(spec["metrics"])
    doc = {
        "apiVersion": "governor.dev/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": metadata,
        "spec": spec,
    }
    try:
        policy = policy_from_obj(doc)
    except PolicyError as err:
        raise ConversionError(f"the converted policy is invalid: {err}") from None
    return Conversion(
        policy=policy,
        notes=notes,
        unconverted=unconverted,
        namespace_given="namespace" in metadata,
    )


def to_document(policy: ScalingPolicy, namespace_given: bool = True) -> dict[str, Any]:
    """The policy as a complete Kubernetes object: apiVersion and kind first (they equal their
    defaults, so msgspec alone would leave them out and `kubectl apply` would refuse the file),
    the namespace written out when given (also when it is the default)."""
    body = msgspec.to_builtins(policy)
    if namespace_given:
        body["metadata"] = {"name": policy.metadata.name, **body["metadata"]}
        body["metadata"]["namespace"] = policy.metadata.namespace
    return {"apiVersion": policy.api_version, "kind": policy.kind, **body}
