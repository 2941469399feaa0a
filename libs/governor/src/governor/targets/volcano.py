"""Volcano Job (batch.volcano.sh): one task of spec.tasks. It has no scale subresource, so the
replicas' pointer is the task's own, `/spec/tasks/<i>/replicas`, found in the object."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from governor.inventory.names import InventoryError
from governor.inventory.objects import K8sObject, LabelSelector, PodTemplate
from governor.spec import TargetRef
from governor.targets.base import TargetKind, TargetView, convert

GROUP = "batch.volcano.sh"
# Volcano labels a job's pods with these: the pods of one task.
JOB_LABEL = "volcano.sh/job-name"
TASK_LABEL = "volcano.sh/task-spec"


class _VolcanoTask(K8sObject):
    name: str = ""
    replicas: int = 0
    template: PodTemplate = msgspec.field(default_factory=PodTemplate)


class _VolcanoJobSpec(K8sObject):
    tasks: list[_VolcanoTask] = msgspec.field(default_factory=list)
    priority_class_name: str = ""


class _TaskState(K8sObject):
    phase: dict[str, int] = msgspec.field(default_factory=dict)


class _VolcanoJobStatus(K8sObject):
    state: dict[str, Any] | None = None
    task_status_count: dict[str, _TaskState] = msgspec.field(default_factory=dict)
    retry_count: int = 0


class _VolcanoJob(K8sObject):
    spec: _VolcanoJobSpec = msgspec.field(default_factory=_VolcanoJobSpec)
    status: _VolcanoJobStatus = msgspec.field(default_factory=_VolcanoJobStatus)


class VolcanoJob(TargetKind):
    name = "volcano"
    queued = True

    def matches(self, group: str, kind: str) -> bool:
        return group == GROUP and kind == "Job"

    def missing(self, ref: TargetRef) -> tuple[str, str] | None:
        if ref.task:
            return None
        return "targetRef.task", "a Volcano Job target must name the task to scale"

    def read(self, ref: TargetRef, obj: Mapping[str, Any], name: str) -> TargetView:
        v = convert(obj, _VolcanoJob, name)
        task = next((t for t in v.spec.tasks if t.name == ref.task), None)
        if task is None:
            raise InventoryError(f"{name}: no task {ref.task!r} in spec.tasks")
        ready = None
        if v.status.state is not None:
            ready = v.status.task_status_count.get(task.name, _TaskState()).phase.get("Running", 0)
        return TargetView(
            spec_replicas=task.replicas,
            status_ready=ready,
            selector=LabelSelector(match_labels={JOB_LABEL: ref.name, TASK_LABEL: task.name}),
            template=task.template,
            priority_class=v.spec.priority_class_name or task.template.spec.priority_class_name,
            restarts=v.status.retry_count,
        )

    def replicas_pointer(self, ref: TargetRef, scale_path: str | None = None) -> str | None:
        return None  # the task's index is in the object: policy.actuation.read_target

    @staticmethod
    def task_pointer(index: int) -> str:
        return f"/spec/tasks/{index}/replicas"


VOLCANO_JOB = VolcanoJob()
