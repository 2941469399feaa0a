"""ResourceQuotas and Volcano Queues: pure conversions from Kubernetes objects to their events.

What a quota or a queue covers (Kubernetes' and Volcano's own rules, as far as governor reads):

* A ResourceQuota covers the pods of its namespace that match ALL its scopes (`spec.scopes` and
  `spec.scopeSelector.matchExpressions`): `Terminating` / `NotTerminating` (activeDeadlineSeconds
  set or not; governor reads every pod as not terminating, scaled pods do not set it),
  `BestEffort` / `NotBestEffort` (no request or limit at all, or some), and `PriorityClass`
  (In / NotIn / Exists / DoesNotExist on the pod's priorityClassName; the bare scope means
  Exists). One pod costs, per hard resource: `cpu`/`requests.cpu` its effective request,
  `limits.cpu` its effective limit (the request where a container sets none), `pods`/`count/pods`
  one, `requests.<extended>` (e.g. `requests.nvidia.com/gpu`) its request.
  Other `count/*` objects are not pods and cost nothing here.
* A Volcano Queue covers a Volcano Job through `spec.queue` (empty: the queue "default"), and any
  other pod through its PodGroup (annotation `scheduling.k8s.io/group-name` -> the PodGroup's
  `spec.queue`) or the annotation `scheduling.volcano.sh/queue-name`. One pod costs its requests.

A scaled workload's cost is that of one pod of its template; the pods governor does not scale
(`managed` false) are summed as the quota's or queue's `unmanaged` use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from governor.events import QueueState, QuotaState
from governor.inventory import (
    Meta,
    Pod,
    PodSpec,
    PodTemplate,
    Quantity,
    ResourceRequirements,
    parse_resources,
    pod_live,
    pod_requests,
)

GROUP_NAME = "scheduling.k8s.io/group-name"
QUEUE_NAME = "scheduling.volcano.sh/queue-name"
QUEUE_API = "scheduling.volcano.sh/v1beta1"  # Queue (cluster-scoped) and PodGroup
DEFAULT_QUEUE = "default"
POD_COUNTS = frozenset({"pods", "count/pods"})
_PLAIN = frozenset({"cpu", "memory", "ephemeral-storage"})


class _K(msgspec.Struct, rename="camel", omit_defaults=True):
    """Partial Kubernetes models: camelCase, unknown fields ignored."""


class ScopedSelectorRequirement(_K):
    scope_name: str
    operator: str
    values: list[str] = []


class ScopeSelector(_K):
    match_expressions: list[ScopedSelectorRequirement] = []


class ResourceQuotaSpec(_K):
    hard: dict[str, Quantity] = {}
    scopes: list[str] = []
    scope_selector: ScopeSelector | None = None


class ResourceQuotaStatus(_K):
    hard: dict[str, Quantity] = {}
    used: dict[str, Quantity] = {}


class ResourceQuota(_K):
    metadata: Meta = msgspec.field(default_factory=Meta)
    spec: ResourceQuotaSpec = msgspec.field(default_factory=ResourceQuotaSpec)
    status: ResourceQuotaStatus = msgspec.field(default_factory=ResourceQuotaStatus)


class Guarantee(_K):
    resource: dict[str, Quantity] = {}


class QueueSpec(_K):
    capability: dict[str, Quantity] = {}
    deserved: dict[str, Quantity] = {}
    guarantee: Guarantee = msgspec.field(default_factory=Guarantee)
    weight: int = 1
    reclaimable: bool | None = None  # unset: reclaimable
    parent: str = ""


class QueueStatus(_K):
    state: str = ""
    allocated: dict[str, Quantity] = {}


class Queue(_K):
    """Volcano `scheduling.volcano.sh/v1beta1` Queue (cluster-scoped)."""

    metadata: Meta = msgspec.field(default_factory=Meta)
    spec: QueueSpec = msgspec.field(default_factory=QueueSpec)
    status: QueueStatus = msgspec.field(default_factory=QueueStatus)


class PodGroupSpec(_K):
    queue: str = ""
    priority_class_name: str = ""


class PodGroup(_K):
    metadata: Meta = msgspec.field(default_factory=Meta)
    spec: PodGroupSpec = msgspec.field(default_factory=PodGroupSpec)


class _QueueRef(_K):
    queue: str = ""


class _WithQueue(_K):
    spec: _QueueRef = msgspec.field(default_factory=_QueueRef)


@dataclass(frozen=True)
class Covered:
    """A scaled workload as quotas and queues see it: one pod of its template."""

    workload: str
    namespace: str
    template: PodTemplate | None
    priority_class: str = ""
    queue: str | None = None  # a Volcano Job's spec.queue (or "default"); None: not a Job


def job_queue(obj: Mapping[str, Any]) -> str:
    """A Volcano Job's queue: `spec.queue`, empty meaning "default"."""
    return msgspec.convert(obj, _WithQueue).spec.queue or DEFAULT_QUEUE


# --- one pod's cost ---------------------------------------------------------------------------


def pod_limits(spec: PodSpec) -> dict[str, float]:
    """The pod's effective limit per resource, the way its request is computed: each container's
    limit, or its request where it sets none."""

    def as_limits(c: Any) -> Any:
        both = dict(c.resources.requests)
        both.update(c.resources.limits)
        return msgspec.structs.replace(c, resources=ResourceRequirements(requests=both))

    return pod_requests(
        msgspec.structs.replace(
            spec,
            containers=[as_limits(c) for c in spec.containers],
            init_containers=[as_limits(c) for c in spec.init_containers],
        )
    )


def quota_cost(hard: Iterable[str], spec: PodSpec) -> dict[str, float]:
    """What one pod takes of each of a quota's hard resources."""
    return quota_cost_of(hard, pod_requests(spec), lambda: pod_limits(spec))


def quota_cost_of(
    hard: Iterable[str],
    requests: Mapping[str, float],
    limits: Callable[[], Mapping[str, float]] | Mapping[str, float],
) -> dict[str, float]:
    """What one replica with these requests (and limits: a mapping, or a function computing it
    on first use) takes of each of a quota's hard resources."""
    known: Mapping[str, float] | None = None if callable(limits) else limits
    out: dict[str, float] = {}
    for name in hard:
        if name in POD_COUNTS:
            out[name] = 1.0
        elif name in _PLAIN:
            out[name] = requests.get(name, 0.0)
        elif name.startswith("requests."):
            out[name] = requests.get(name.removeprefix("requests."), 0.0)
        elif name.startswith("limits."):
            if known is None:
                assert callable(limits)
                known = limits()
            resource = name.removeprefix("limits.")
            out[name] = known.get(resource, requests.get(resource, 0.0))
    return {k: v for k, v in out.items() if v > 0}


def _best_effort(spec: PodSpec) -> bool:
    return not any(c.resources.requests or c.resources.limits for c in spec.containers)


def _matches(req: ScopedSelectorRequirement, spec: PodSpec, terminating: bool) -> bool:
    scope, op = req.scope_name, req.operator
    if scope == "PriorityClass":
        has = bool(spec.priority_class_name)
        if op == "Exists":
            return has
        if op == "DoesNotExist":
            return not has
        inside = spec.priority_class_name in req.values
        return inside if op == "In" else not inside
    if scope == "BestEffort":
        value = _best_effort(spec)
    elif scope == "NotBestEffort":
        value = not _best_effort(spec)
    elif scope == "Terminating":
        value = terminating
    elif scope == "NotTerminating":
        value = not terminating
    else:  # CrossNamespacePodAffinity and scopes governor does not read: not a scaled pod's
        return False
    return value if op in ("Exists", "In") else not value


def scope_matches(quota: ResourceQuota, spec: PodSpec, *, terminating: bool = False) -> bool:
    """Does the quota's scope select a pod with this spec."""
    reqs = [ScopedSelectorRequirement(scope_name=s, operator="Exists") for s in quota.spec.scopes]
    if quota.spec.scope_selector is not None:
        reqs += quota.spec.scope_selector.match_expressions
    return all(_matches(r, spec, terminating) for r in reqs)


def _template_spec(c: Covered) -> PodSpec:
    spec = c.template.spec if c.template is not None else PodSpec()
    if c.priority_class and not spec.priority_class_name:
        spec = msgspec.structs.replace(spec, priority_class_name=c.priority_class)
    return spec


# --- events -----------------------------------------------------------------------------------


def quota_state(
    quota: ResourceQuota,
    workloads: Iterable[Covered],
    pods: Iterable[Pod],
    managed: Callable[[Pod], bool],
    now: float,
) -> QuotaState:
    """The quota's event: its hard and used, what each covered workload's replica costs, and what
    the live pods governor does not scale hold of it (`pods`: the namespace's pods)."""
    ns = quota.metadata.namespace
    hard = parse_resources(quota.spec.hard)
    covers: dict[str, dict[str, float]] = {}
    for c in sorted(workloads, key=lambda c: c.workload):
        spec = _template_spec(c)
        if c.namespace == ns and scope_matches(quota, spec):
            covers[c.workload] = quota_cost(hard, spec)
    unmanaged: dict[str, float] = {}
    for pod in pods:
        if pod.metadata.namespace != ns or not pod_live(pod) or managed(pod):
            continue
        if scope_matches(quota, pod.spec):
            for r, a in quota_cost(hard, pod.spec).items():
                unmanaged[r] = unmanaged.get(r, 0.0) + a
    selector = quota.spec.scope_selector
    classes = None
    if selector is not None:
        named = [e for e in selector.match_expressions if e.scope_name == "PriorityClass"]
        if named:
            classes = sorted({v for e in named for v in e.values})
    return QuotaState(
        quota=f"{ns}/{quota.metadata.name}",
        namespace=ns,
        hard=hard,
        used=parse_resources(quota.status.used),
        unmanaged={k: round(v, 9) for k, v in sorted(unmanaged.items())},
        covers=covers,
        scopes=sorted(
            {*quota.spec.scopes, *(e.scope_name for e in selector.match_expressions)}
            if selector is not None
            else set(quota.spec.scopes)
        ),
        priority_classes=classes,
        observed_at=now,
    )


def pod_queue(pod_meta: Meta, groups: Mapping[str, PodGroup]) -> str | None:
    """The queue of a pod (or template): its PodGroup's, else its queue-name annotation.
    `groups`: PodGroups by namespace/name."""
    group = pod_meta.annotations.get(GROUP_NAME)
    if group:
        pg = groups.get(f"{pod_meta.namespace}/{group}")
        if pg is not None:
            return pg.spec.queue or DEFAULT_QUEUE
    return pod_meta.annotations.get(QUEUE_NAME) or None


def workload_queue(c: Covered, groups: Mapping[str, PodGroup]) -> str | None:
    if c.queue is not None:
        return c.queue
    if c.template is None:
        return None
    meta = msgspec.structs.replace(c.template.metadata, namespace=c.namespace)
    return pod_queue(meta, groups)


def queue_state(
    queue: Queue,
    workloads: Iterable[Covered],
    pods: Iterable[Pod],
    groups: Mapping[str, PodGroup],
    managed: Callable[[Pod], bool],
    now: float,
) -> QueueState:
    """The queue's event: its spec, and what its scaled workloads' replicas and the other pods
    in it request."""
    name = queue.metadata.name
    covers = {
        c.workload: pod_requests(_template_spec(c))
        for c in sorted(workloads, key=lambda c: c.workload)
        if workload_queue(c, groups) == name
    }
    unmanaged: dict[str, float] = {}
    for pod in pods:
        if not pod_live(pod) or managed(pod) or pod_queue(pod.metadata, groups) != name:
            continue
        for r, a in pod_requests(pod.spec).items():
            unmanaged[r] = unmanaged.get(r, 0.0) + a
    s = queue.spec
    return QueueState(
        queue=name,
        capability=parse_resources(s.capability),
        deserved=parse_resources(s.deserved),
        guarantee=parse_resources(s.guarantee.resource),
        weight=s.weight,
        reclaimable=s.reclaimable is not False,
        parent=s.parent,
        state=queue.status.state or "Open",
        allocated=parse_resources(queue.status.allocated),
        unmanaged={k: round(v, 9) for k, v in sorted(unmanaged.items())},
        covers=covers,
        observed_at=now,
    )
