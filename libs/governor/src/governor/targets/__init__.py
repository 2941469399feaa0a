"""Scale targets, one file per kind behind one interface (`base.TargetKind`): where a kind's
replicas live (`replicas_pointer`), what governor reads of it (`read` -> `TargetView`) and which
pods it manages (`selector`).

| kind | file |
|---|---|
| Deployment, StatefulSet, ReplicaSet | apps.py |
| any CRD with a scale subresource; PyTorchJob | scalable_crd.py |
| Volcano Job | volcano.py |

A new kind: a `TargetKind` in a file of its own, put in `KINDS` before the generic fallback.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from governor.spec import ScalingPolicy, TargetRef
from governor.targets.apps import APPS
from governor.targets.base import TargetKind, TargetView, escape_pointer, to_pointer
from governor.targets.scalable_crd import PYTORCHJOB, SCALABLE_CRD
from governor.targets.volcano import VOLCANO_JOB

__all__ = [
    "KINDS",
    "TargetKind",
    "TargetView",
    "escape_pointer",
    "kind_of",
    "target_kind",
    "target_view",
    "to_pointer",
]

# First match wins; the scalable CRD reader takes whatever the others do not.
KINDS: tuple[TargetKind, ...] = (APPS, PYTORCHJOB, VOLCANO_JOB, SCALABLE_CRD)


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0] if "/" in api_version else ""


def kind_of(ref: TargetRef) -> TargetKind:
    """The reader of `ref`'s kind."""
    group = _group(ref.api_version)
    return next(k for k in KINDS if k.matches(group, ref.kind))


def target_kind(api_version: str, kind: str) -> str:
    """Which reader applies: apps, pytorchjob, volcano or generic (a CRD with a scale path)."""
    group = _group(api_version)
    return next(k for k in KINDS if k.matches(group, kind)).name


def target_view(policy: ScalingPolicy, obj: Mapping[str, Any]) -> TargetView:
    """Read a policy's target object (as decoded JSON) into a `TargetView`."""
    ref = policy.spec.target_ref
    return kind_of(ref).read(ref, obj, f"{ref.kind} {policy.metadata.namespace}/{ref.name}")
