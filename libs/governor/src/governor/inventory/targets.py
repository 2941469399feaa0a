"""A scale target's WorkloadState, and which pods the policies' targets manage. Reading a
target of each kind into a `TargetView` is `governor.targets`."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from governor.events import (
    WorkloadState,
)
from governor.inventory.names import (
    DEVICE_JOINT_ALLOCATE,
    InventoryError,
)
from governor.inventory.objects import (
    LabelSelector,
    Pod,
    parse_joint_allocate,
)
from governor.inventory.pods import pod_ready, pod_requests
from governor.inventory.quantities import _rounded
from governor.inventory.selectors import selector_matches, selector_string
from governor.policy import startup
from governor.spec import ScalingPolicy
from governor.targets.base import timestamp

if TYPE_CHECKING:  # governor.targets reads objects with this package's models
    from governor.targets import TargetView


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
        created = timestamp(p.metadata.creation_timestamp)
        ready_at = next(
            (timestamp(c.last_transition_time) for c in p.status.conditions if c.type == "Ready"),
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
