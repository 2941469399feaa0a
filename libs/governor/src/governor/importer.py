"""Coming from HPA or KEDA: convert HorizontalPodAutoscalers and ScaledObjects to ScalingPolicies.

Pure: decoded YAML documents in, validated ScalingPolicies and what could not be carried over
out. `convert` takes one object; `convert_documents` takes a whole file's documents, skips what
is not an autoscaler (one line each) and hands each ScaledObject the TriggerAuthentications of
the same file. Nothing is dropped silently: every field is converted or named in
`Conversion.notes` (the table in importer_fields, also printed as docs/scalingpolicy.md's
migration table), a trigger or metric that cannot be converted is listed in
`Conversion.unconverted`, and an object KEDA or the API server would reject is refused
(ConversionError) with their reason.

- HPA, every served version: importer_hpa (v2beta1 and v1 are converted as the API server does).
- KEDA ScaledObject: importer_keda, triggers through importer_scalers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

import msgspec

from governor.importer_hpa import from_hpa
from governor.importer_keda import from_scaled_object
from governor.importer_result import Conversion, ConversionError, to_document
from governor.importer_scalers import Auth, auth_of

__all__ = [
    "Conversion",
    "ConversionError",
    "Outcome",
    "convert",
    "convert_documents",
    "to_document",
]

AUTH_KINDS = ("TriggerAuthentication", "ClusterTriggerAuthentication")
# Autoscalers governor has no counterpart for: refused with why, not skipped as "not one".
NOT_CONVERTED = {
    "ScaledJob": (
        "a KEDA ScaledJob starts a Job per batch of events; governor scales long-running "
        "workloads (Deployment, StatefulSet, scalable CRDs, Volcano Job): no equivalent"
    ),
    "VerticalPodAutoscaler": (
        "vertical resizing (requests/limits) is out of governor's scope: keep the VPA, on "
        "another target than the one governor scales"
    ),
}


def convert(obj: Mapping[str, Any], auths: Mapping[str, Auth] | None = None) -> Conversion:
    """A HorizontalPodAutoscaler or a KEDA ScaledObject -> ScalingPolicy."""
    try:
        return _convert(obj, auths)
    except (TypeError, AttributeError, KeyError, ValueError) as err:
        if isinstance(err, ConversionError):
            raise
        # The shape checks name a wrong field; this is the backstop for one they do not cover.
        raise ConversionError(
            f"a field has an unexpected type or value ({type(err).__name__}: {err}); "
            "kubectl apply --dry-run=server of the original names it"
        ) from None


def _convert(obj: Mapping[str, Any], auths: Mapping[str, Auth] | None) -> Conversion:
    kind, api = obj.get("kind"), str(obj.get("apiVersion", ""))
    if kind == "HorizontalPodAutoscaler" and api.startswith("autoscaling/"):
        return from_hpa(obj)
    if kind == "ScaledObject" and api.startswith("keda.sh/"):
        if api != "keda.sh/v1alpha1":
            raise ConversionError(f'no matches for kind "ScaledObject" in version "{api}"')
        return from_scaled_object(obj, auths)
    if kind in NOT_CONVERTED:
        raise ConversionError(NOT_CONVERTED[str(kind)])
    raise ConversionError(
        f"{kind or 'an object without kind'} ({api}): expected an autoscaling/* "
        "HorizontalPodAutoscaler or a keda.sh/v1alpha1 ScaledObject"
    )


class Outcome(msgspec.Struct):
    """What became of one document of a file."""

    index: int
    kind: str
    name: str
    status: Literal["converted", "skipped", "refused"]
    conversion: Conversion | None = None
    reason: str = ""  # why it was skipped or refused

    @property
    def label(self) -> str:
        return f"{self.kind or 'document'} {self.name}"


def _is_autoscaler(doc: Mapping[str, Any]) -> bool:
    return doc.get("kind") in ("HorizontalPodAutoscaler", "ScaledObject", *NOT_CONVERTED)


def _name(doc: Mapping[str, Any], i: int) -> str:
    md = doc.get("metadata")
    name = md.get("name") if isinstance(md, Mapping) else None
    return str(name or f"#{i}")


def _flatten(docs: Iterable[Any]) -> list[Any]:
    """Documents, with the items of a list (`kubectl get -o yaml` writes `kind: List`, or
    `HorizontalPodAutoscalerList`) in place of the list."""
    out: list[Any] = []
    for d in docs:
        if d is None:
            continue
        kind = str(d.get("kind") or "") if isinstance(d, Mapping) else ""
        if isinstance(d, Mapping) and kind.endswith("List") and isinstance(d.get("items"), list):
            item_kind = kind.removesuffix("List")
            for item in d["items"]:
                if isinstance(item, Mapping) and item_kind and "kind" not in item:
                    item = {"apiVersion": d.get("apiVersion"), "kind": item_kind, **item}
                out.append(item)
        else:
            out.append(d)
    return out


def convert_documents(docs: Iterable[Any]) -> list[Outcome]:
    """Every document of a file (list items one by one), in order: autoscalers converted or
    refused, the rest skipped."""
    items = _flatten(docs)
    auths = {
        _name(d, i): auth_of(d)
        for i, d in enumerate(items)
        if isinstance(d, Mapping) and d.get("kind") in AUTH_KINDS
    }
    out: list[Outcome] = []
    for i, doc in enumerate(items):
        if not isinstance(doc, Mapping):
            out.append(Outcome(i, "", f"#{i}", "skipped", reason="not a mapping (not an object)"))
            continue
        kind = str(doc.get("kind") or "")
        name = _name(doc, i)
        if not _is_autoscaler(doc):
            why = (
                "read for the ScaledObjects' authenticationRef"
                if kind in AUTH_KINDS
                else "not an autoscaler"
            )
            out.append(Outcome(i, kind, name, "skipped", reason=why))
            continue
        try:
            out.append(Outcome(i, kind, name, "converted", conversion=convert(doc, auths)))
        except ConversionError as err:
            out.append(Outcome(i, kind, name, "refused", reason=str(err)))
    return out
