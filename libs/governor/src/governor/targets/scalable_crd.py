"""Any custom resource with a scale subresource, and PyTorchJob (kubeflow.org) among them.

The replicas live at `targetRef.specReplicasPath` when the policy names it, else at the CRD's
scale subresource's specReplicasPath (the caller reads the CRD: `needs_scale_subresource`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from governor.inventory.names import KUBEFLOW_JOB_LABEL, KUBEFLOW_REPLICA_LABEL, InventoryError
from governor.inventory.objects import (
    K8sObject,
    LabelSelector,
    LabelSelectorRequirement,
    PodTemplate,
)
from governor.inventory.selectors import parse_selector_string
from governor.spec import TargetRef
from governor.targets.base import (
    TargetKind,
    TargetView,
    convert,
    dig,
    path_segments,
    timestamp,
    to_pointer,
)


class ScalableCrd(TargetKind):
    """Read through its specReplicasPath (default `.spec.replicas`); the pod template beside
    the replicas, the selector and readiness from `status.selector` / `status.readyReplicas`."""

    name = "generic"

    def matches(self, group: str, kind: str) -> bool:
        return True  # the fallback: whatever no other kind claims

    def read(self, ref: TargetRef, obj: Mapping[str, Any], name: str) -> TargetView:
        segs = path_segments(ref.spec_replicas_path or ".spec.replicas")
        replicas = dig(obj, segs)
        if not isinstance(replicas, int) or isinstance(replicas, bool):
            raise InventoryError(f"{name}: no integer at {'.'.join(segs)}")
        template_raw = dig(obj, [*segs[:-1], "template"])
        template = (
            convert(template_raw, PodTemplate, f"{name} template")
            if isinstance(template_raw, Mapping)
            else None
        )
        sel_raw = dig(obj, ["status", "selector"])
        ready_raw = dig(obj, ["status", "readyReplicas"])
        return TargetView(
            spec_replicas=replicas,
            status_ready=ready_raw if isinstance(ready_raw, int) else None,
            selector=parse_selector_string(sel_raw) if isinstance(sel_raw, str) else None,
            template=template,
            priority_class=template.spec.priority_class_name if template else "",
        )

    def needs_scale_subresource(self, ref: TargetRef) -> bool:
        return not ref.spec_replicas_path

    def replicas_pointer(self, ref: TargetRef, scale_path: str | None = None) -> str | None:
        if ref.spec_replicas_path:
            return to_pointer(ref.spec_replicas_path)
        return to_pointer(scale_path) if scale_path else None


class _ReplicaSpec(K8sObject):
    replicas: int = 1
    template: PodTemplate = msgspec.field(default_factory=PodTemplate)


class _ReplicaStatus(K8sObject):
    active: int = 0
    selector: str = ""
    label_selector: LabelSelector | None = None


class _PyTorchJobSpec(K8sObject):
    pytorch_replica_specs: dict[str, _ReplicaSpec] = msgspec.field(default_factory=dict)


class _PyTorchJobStatus(K8sObject):
    replica_statuses: dict[str, _ReplicaStatus] | None = None
    start_time: str | None = None


class _PyTorchJob(K8sObject):
    spec: _PyTorchJobSpec = msgspec.field(default_factory=_PyTorchJobSpec)
    status: _PyTorchJobStatus = msgspec.field(default_factory=_PyTorchJobStatus)


class PyTorchJob(ScalableCrd):
    """One replica type (targetRef.task, else Worker) of spec.pytorchReplicaSpecs; patched
    through its scale subresource like any scalable CRD."""

    name = "pytorchjob"

    def matches(self, group: str, kind: str) -> bool:
        return group == "kubeflow.org" and kind == "PyTorchJob"

    def read(self, ref: TargetRef, obj: Mapping[str, Any], name: str) -> TargetView:
        j = convert(obj, _PyTorchJob, name)
        rtype = ref.task or "Worker"
        if ref.spec_replicas_path:
            segs = path_segments(ref.spec_replicas_path)
            if len(segs) >= 3 and segs[1] == "pytorchReplicaSpecs":
                rtype = segs[2]
        rspec = j.spec.pytorch_replica_specs.get(rtype)
        if rspec is None:
            raise InventoryError(f"{name}: no spec.pytorchReplicaSpecs.{rtype}")
        rstatus = (j.status.replica_statuses or {}).get(rtype)
        selector = LabelSelector(
            match_labels={KUBEFLOW_JOB_LABEL: ref.name},
            match_expressions=[
                LabelSelectorRequirement(KUBEFLOW_REPLICA_LABEL, "In", [rtype.lower(), rtype])
            ],
        )
        if rstatus is not None and rstatus.label_selector is not None:
            selector = rstatus.label_selector
        elif rstatus is not None and rstatus.selector:
            selector = parse_selector_string(rstatus.selector)
        return TargetView(
            spec_replicas=rspec.replicas,
            status_ready=rstatus.active if rstatus is not None else None,
            selector=selector,
            template=rspec.template,
            priority_class=rspec.template.spec.priority_class_name,
            started_at=timestamp(j.status.start_time),
        )


SCALABLE_CRD = ScalableCrd()
PYTORCHJOB = PyTorchJob()
