"""Scale targets (Deployment, StatefulSet, PyTorchJob, Volcano Job) -> TargetView and
WorkloadState, and which pods a target manages.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import msgspec

from governor.events import (
    WorkloadState,
)
from governor.inventory.names import (
    DEVICE_JOINT_ALLOCATE,
    KUBEFLOW_JOB_LABEL,
    KUBEFLOW_REPLICA_LABEL,
    VOLCANO_JOB_LABEL,
    VOLCANO_TASK_LABEL,
    InventoryError,
)
from governor.inventory.objects import (
    _K,
    LabelSelector,
    LabelSelectorRequirement,
    Pod,
    PodTemplate,
    parse_joint_allocate,
)
from governor.inventory.pods import pod_ready, pod_requests
from governor.inventory.quantities import _rounded
from governor.inventory.selectors import parse_selector_string, selector_matches, selector_string
from governor.policy import startup
from governor.spec import ScalingPolicy, TargetRef


class _AppsSpec(_K):
    replicas: int = 1
    selector: LabelSelector | None = None
    template: PodTemplate = msgspec.field(default_factory=PodTemplate)


class _AppsStatus(_K):
    observed_generation: int | None = None
    ready_replicas: int = 0


class _Apps(_K):
    spec: _AppsSpec = msgspec.field(default_factory=_AppsSpec)
    status: _AppsStatus = msgspec.field(default_factory=_AppsStatus)


class _ReplicaSpec(_K):
    replicas: int = 1
    template: PodTemplate = msgspec.field(default_factory=PodTemplate)


class _ReplicaStatus(_K):
    active: int = 0
    selector: str = ""
    label_selector: LabelSelector | None = None


class _PyTorchJobSpec(_K):
    pytorch_replica_specs: dict[str, _ReplicaSpec] = msgspec.field(default_factory=dict)


class _PyTorchJobStatus(_K):
    replica_statuses: dict[str, _ReplicaStatus] | None = None
    start_time: str | None = None


class _PyTorchJob(_K):
    spec: _PyTorchJobSpec = msgspec.field(default_factory=_PyTorchJobSpec)
    status: _PyTorchJobStatus = msgspec.field(default_factory=_PyTorchJobStatus)


class _VolcanoTask(_K):
    name: str = ""
    replicas: int = 0
    template: PodTemplate = msgspec.field(default_factory=PodTemplate)


class _VolcanoJobSpec(_K):
    tasks: list[_VolcanoTask] = msgspec.field(default_factory=list)
    priority_class_name: str = ""


class _TaskState(_K):
    phase: dict[str, int] = msgspec.field(default_factory=dict)


class _VolcanoJobStatus(_K):
    state: dict[str, Any] | None = None
    task_status_count: dict[str, _TaskState] = msgspec.field(default_factory=dict)
    retry_count: int = 0


class _VolcanoJob(_K):
    spec: _VolcanoJobSpec = msgspec.field(default_factory=_VolcanoJobSpec)
    status: _VolcanoJobStatus = msgspec.field(default_factory=_VolcanoJobStatus)


@dataclass(frozen=True)
class TargetView:
    """What governor reads of a scaling target, whatever its kind."""

    spec_replicas: int
    # From the target's status; None when the status does not say (no controller yet).
    status_ready: int | None
    selector: LabelSelector | None
    template: PodTemplate | None
    priority_class: str = ""
    restarts: int = 0
    started_at: float | None = None


def _path_segments(path: str) -> list[str]:
    """`.spec.a.b`, `spec.a.b` or the JSON pointer `/spec/a/b` → ["spec", "a", "b"]."""
    if path.startswith("/"):
        return [s.replace("~1", "/").replace("~0", "~") for s in path[1:].split("/")]
    return [s for s in path.split(".") if s]


def _dig(obj: Any, segments: Sequence[str]) -> Any:
    for s in segments:
        if isinstance(obj, Mapping):
            obj = obj.get(s)
        elif isinstance(obj, list) and s.isdigit() and int(s) < len(obj):
            obj = obj[int(s)]
        else:
            return None
    return obj


def _timestamp(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


_T = TypeVar("_T")


def _convert(obj: Mapping[str, Any], typ: type[_T], what: str) -> _T:
    try:
        return msgspec.convert(obj, typ, str_keys=True)
    except msgspec.ValidationError as e:
        raise InventoryError(f"{what}: {e}") from None


def target_kind(api_version: str, kind: str) -> str:
    """Which reader applies: apps, pytorchjob, volcano or generic (a CRD with a scale path)."""
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    if group == "apps" and kind in ("Deployment", "StatefulSet", "ReplicaSet"):
        return "apps"
    if group == "kubeflow.org" and kind == "PyTorchJob":
        return "pytorchjob"
    if group == "batch.volcano.sh" and kind == "Job":
        return "volcano"
    return "generic"


def target_view(policy: ScalingPolicy, obj: Mapping[str, Any]) -> TargetView:
    """Read a policy's target object (as decoded JSON) into a `TargetView`."""
    ref = policy.spec.target_ref
    name = f"{ref.kind} {policy.metadata.namespace}/{ref.name}"
    which = target_kind(ref.api_version, ref.kind)
    if which == "apps":
        return _apps_view(ref, obj, name)
    if which == "pytorchjob":
        return _pytorchjob_view(ref, obj, name)
    if which == "volcano":
        return _volcano_view(ref, obj, name)
    return _scalable_view(ref, obj, name)


def _apps_view(ref: TargetRef, obj: Mapping[str, Any], name: str) -> TargetView:
    """Deployment, StatefulSet: spec.replicas, the selector and the pod template."""
    a = _convert(obj, _Apps, name)
    status = a.status.ready_replicas if a.status.observed_generation is not None else None
    return TargetView(
        spec_replicas=a.spec.replicas,
        status_ready=status,
        selector=a.spec.selector,
        template=a.spec.template,
        priority_class=a.spec.template.spec.priority_class_name,
    )


def _pytorchjob_view(ref: TargetRef, obj: Mapping[str, Any], name: str) -> TargetView:
    """PyTorchJob: one replica type (targetRef.task, else Worker) of pytorchReplicaSpecs."""
    j = _convert(obj, _PyTorchJob, name)
    rtype = ref.task or "Worker"
    if ref.spec_replicas_path:
        segs = _path_segments(ref.spec_replicas_path)
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
        started_at=_timestamp(j.status.start_time),
    )


def _volcano_view(ref: TargetRef, obj: Mapping[str, Any], name: str) -> TargetView:
    """Volcano Job: one task of spec.tasks (it has no scale subresource)."""
    v = _convert(obj, _VolcanoJob, name)
    task = next((t for t in v.spec.tasks if t.name == ref.task), None)
    if task is None:
        raise InventoryError(f"{name}: no task {ref.task!r} in spec.tasks")
    ready = None
    if v.status.state is not None:
        ready = v.status.task_status_count.get(task.name, _TaskState()).phase.get("Running", 0)
    return TargetView(
        spec_replicas=task.replicas,
        status_ready=ready,
        selector=LabelSelector(
            match_labels={VOLCANO_JOB_LABEL: ref.name, VOLCANO_TASK_LABEL: task.name}
        ),
        template=task.template,
        priority_class=v.spec.priority_class_name or task.template.spec.priority_class_name,
        restarts=v.status.retry_count,
    )


def _scalable_view(ref: TargetRef, obj: Mapping[str, Any], name: str) -> TargetView:
    """Any CRD with a scale subresource, read through its specReplicasPath."""
    segs = _path_segments(ref.spec_replicas_path or ".spec.replicas")
    replicas = _dig(obj, segs)
    if not isinstance(replicas, int) or isinstance(replicas, bool):
        raise InventoryError(f"{name}: no integer at {'.'.join(segs)}")
    template_raw = _dig(obj, [*segs[:-1], "template"])
    template = (
        _convert(template_raw, PodTemplate, f"{name} template")
        if isinstance(template_raw, Mapping)
        else None
    )
    sel_raw = _dig(obj, ["status", "selector"])
    ready_raw = _dig(obj, ["status", "readyReplicas"])
    return TargetView(
        spec_replicas=replicas,
        status_ready=ready_raw if isinstance(ready_raw, int) else None,
        selector=parse_selector_string(sel_raw) if isinstance(sel_raw, str) else None,
        template=template,
        priority_class=template.spec.priority_class_name if template else "",
    )


def workload_state(
    policy: ScalingPolicy,
    view: TargetView,
    namespace_pods: Iterable[Pod],
    now: float = 0.0,
) -> tuple[WorkloadState, list[str]]:
    """A target's observed state for the workloads topic.

    Ready replicas come from the target's status, or, when it has none, from the readiness of
    the pods that match its selector in its namespace.
    """
    problems: list[str] = []
    ready = view.status_ready
    mine = (
        [
            p
            for p in namespace_pods
            if p.metadata.namespace == policy.metadata.namespace
            and selector_matches(view.selector, p.metadata.labels)
        ]
        if view.selector is not None
        else []
    )
    if ready is None:
        ready = sum(1 for p in mine if pod_ready(p))
    startup_p50, startup_p90 = startup.estimate(startup_durations(mine))
    requests: dict[str, float] = {}
    joint: dict[str, Any] | None = None
    if view.template is not None:
        try:
            requests = pod_requests(view.template.spec)
        except InventoryError as e:
            problems.append(f"{policy.workload} pod template: {e}")
        text = view.template.metadata.annotations.get(DEVICE_JOINT_ALLOCATE)
        if text is not None:
            try:
                joint = parse_joint_allocate(text)
            except InventoryError as e:
                problems.append(f"{policy.workload} pod template: {e}")
    return (
        WorkloadState(
            workload=policy.workload,
            spec_replicas=view.spec_replicas,
            ready_replicas=ready,
            observed_at=now,
            requests=_rounded(requests),
            selector=selector_string(view.selector) if view.selector is not None else "",
            pool=policy.spec.pool,
            joint_allocate=joint,
            restarts=view.restarts,
            started_at=view.started_at,
            startup_p50_seconds=startup_p50,
            startup_p90_seconds=startup_p90,
        ),
        problems,
    )


def startup_durations(pods: Iterable[Pod]) -> list[float]:
    """Requested → Ready of each ready pod (creationTimestamp → the Ready condition's
    lastTransitionTime), oldest pod first, so the newest start-ups weigh in the estimate."""
    found: list[tuple[float, float]] = []
    for p in pods:
        if not pod_ready(p):
            continue
        created = _timestamp(p.metadata.creation_timestamp)
        ready_at = next(
            (_timestamp(c.last_transition_time) for c in p.status.conditions if c.type == "Ready"),
            None,
        )
        if created is not None and ready_at is not None and ready_at >= created:
            found.append((created, ready_at - created))
    return [d for _, d in sorted(found)]


def managed_matcher(
    targets: Iterable[tuple[str, LabelSelector]],
) -> Callable[[Pod], bool]:
    """`pod → bool`: does the pod match one of the (namespace, selector) of policy targets?"""
    by_ns: dict[str, list[LabelSelector]] = {}
    for ns, sel in targets:
        by_ns.setdefault(ns, []).append(sel)

    def managed(pod: Pod) -> bool:
        return any(
            selector_matches(s, pod.metadata.labels) for s in by_ns.get(pod.metadata.namespace, ())
        )

    return managed
