"""Volcano Job (batch.volcano.sh): one task of spec.tasks. It has no scale subresource, so the
replicas' pointer is the task's own, `/spec/tasks/<i>/replicas`, found in the object."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from governor.inventory.names import InventoryError
from governor.inventory.objects import K8sObject, LabelSelector, PodTemplate
from governor.spec import TargetRef
from governor.targets.base import TargetKind, TargetView, TaskReplicas, Tasks, convert

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

    def tasks(self, ref: TargetRef, obj: Mapping[str, Any]) -> Tasks | str:
        spec = obj.get("spec") or {}
        tasks = tuple(
            TaskReplicas(
                str(t.get("name", "")),
                _as_int(t.get("replicas")),
                _as_int(t.get("minAvailable")),
            )
            for t in spec.get("tasks") or []
        )
        index = next((i for i, t in enumerate(tasks) if t.name == ref.task), None)
        if index is None:
            names = ", ".join(t.name for t in tasks) or "none"
            return f"Volcano Job has no task {ref.task!r} (has {names})"
        return Tasks(index, tasks, _as_int(spec.get("minAvailable")), self.task_pointer(index))

    def moves_min_available(self, ref: TargetRef) -> bool:
        return bool(ref.scale_min_available)

    def min_available(
        self, ref: TargetRef, tasks: Tasks, to_replicas: int, wanted: int | None, new_total: int
    ) -> int | str | None:
        task = tasks.tasks[tasks.index]
        if task.min_available is not None and to_replicas < task.min_available:
            return (
                f"task {task.name} minAvailable {task.min_available} > new replicas {to_replicas}"
            )
        wanted = wanted if ref.scale_min_available else None
        if wanted is not None and wanted > new_total:
            return f"min_available {wanted} > the job's replicas after the change ({new_total})"
        job_min = tasks.min_available
        if wanted is None and job_min is not None and job_min > new_total:
            if not ref.scale_min_available:
                return (
                    f"job minAvailable {job_min} > the job's replicas after the change "
                    f"({new_total}); set targetRef.scaleMinAvailable to move it"
                )
            wanted = new_total
        if wanted is not None and wanted == job_min:
            return None
        return wanted


def _as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


VOLCANO_JOB = VolcanoJob()
