"""Deployment, StatefulSet and ReplicaSet (apps/v1): replicas at /spec/replicas."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from governor.inventory.objects import K8sObject, LabelSelector, PodTemplate
from governor.spec import TargetRef
from governor.targets.base import TargetKind, TargetView, convert, to_pointer


class _AppsSpec(K8sObject):
    replicas: int = 1
    selector: LabelSelector | None = None
    template: PodTemplate = msgspec.field(default_factory=PodTemplate)


class _AppsStatus(K8sObject):
    observed_generation: int | None = None
    ready_replicas: int = 0


class _Apps(K8sObject):
    spec: _AppsSpec = msgspec.field(default_factory=_AppsSpec)
    status: _AppsStatus = msgspec.field(default_factory=_AppsStatus)


class Apps(TargetKind):
    name = "apps"
    KINDS = frozenset({"Deployment", "StatefulSet", "ReplicaSet"})

    def matches(self, group: str, kind: str) -> bool:
        return group == "apps" and kind in self.KINDS

    def read(self, ref: TargetRef, obj: Mapping[str, Any], name: str) -> TargetView:
        """spec.replicas, the selector and the pod template; ready from the status once the
        controller has observed the object."""
        a = convert(obj, _Apps, name)
        status = a.status.ready_replicas if a.status.observed_generation is not None else None
        return TargetView(
            spec_replicas=a.spec.replicas,
            status_ready=status,
            selector=a.spec.selector,
            template=a.spec.template,
            priority_class=a.spec.template.spec.priority_class_name,
        )

    def replicas_pointer(self, ref: TargetRef, scale_path: str | None = None) -> str | None:
        if ref.spec_replicas_path:
            return to_pointer(ref.spec_replicas_path)
        return "/spec/replicas"


APPS = Apps()
