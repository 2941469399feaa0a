"""Cluster inventory: pure conversions from Kubernetes objects to the cluster-side events.

The cluster side of the collector watches ScalingPolicies, their targets, Nodes, Pods,
PriorityClasses and Koordinator `Device` objects; everything that turns those objects into
`PolicyRecord`, `WorkloadState` and `NodeState` lives here, without I/O, so that it is tested on
its own and reused by anything that reads a cluster snapshot (the simulator, `governor cluster`).

Kubernetes objects are decoded into the small msgspec models below: only the fields governor
reads, unknown fields ignored. Rules worth knowing (DESIGN.md, "Capacity, priorities and devices"):

* Quantities ("500m", "2Gi", 100) become floats: cpu in cores, memory in bytes, the rest as counts.
* A pod's effective request is Kubernetes' own: max(sum of app containers + sidecars, each init
  container + the sidecars started before it) + pod overhead; a missing request falls back to the
  limit (the API server does the same for pods, but not for pod templates or CRDs).
* A node's requests count every pod bound to it that is not Succeeded/Failed, terminating pods
  included (they hold their resources until they are gone), plus `pods` (one slot per pod).
  A pod is *managed* when it matches the selector of a policy target's scaled replicas in the
  target's namespace (a Deployment's or StatefulSet's selector, a PyTorchJob's replica type, a
  Volcano Job's task); every other pod is *unmanaged* and reduces the pool's capacity.
* Devices: each `spec.devices[]` entry of the node's Device (named after the node) of type gpu,
  rdma or fpga, with its health and topology, minus what the device-allocated annotations of the
  node's live pods hold. Units of `events.Device.total/free`: a GPU in gpu-core (100 per GPU); an
  RDMA NIC in virtual functions when it has `vfGroups`, else 1 (a share of `koordinator.sh/rdma`
  allocates that fraction); an FPGA as 1.
* Priorities: a policy that sets `spec.priority` keeps it; one that does not gets the value of
  the PriorityClass its target's pods would get (the template's `priorityClassName`, a Volcano
  Job's `spec.priorityClassName`, else the cluster's globalDefault class), and the annotation
  `governor.dev/priority-from: PriorityClass/<name>` says so. Mixing explicit tiers with
  class-derived ones therefore compares them on the PriorityClass scale.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any, TypeVar

import msgspec

from governor.events import (
    Device,
    DeviceType,
    Event,
    NodeState,
    PolicyRecord,
    WorkloadState,
)
from governor.spec import ScalingPolicy, policy_from_obj

POOL_LABEL = "governor.dev/pool"
DEFAULT_POOL = "default"
PRIORITY_FROM_ANNOTATION = "governor.dev/priority-from"
DEVICE_ALLOCATED = "scheduling.koordinator.sh/device-allocated"
DEVICE_JOINT_ALLOCATE = "scheduling.koordinator.sh/device-joint-allocate"

GPU_CORE = "koordinator.sh/gpu-core"
GPU_MEMORY_RATIO = "koordinator.sh/gpu-memory-ratio"
RDMA = "koordinator.sh/rdma"
FPGA = "koordinator.sh/fpga"
NVIDIA_GPU = "nvidia.com/gpu"

# Volcano and Kubeflow label their pods with these (volcano.sh/job-name, task-spec;
# training.kubeflow.org/job-name, replica-type — lower case in training-operator v1).
VOLCANO_JOB_LABEL = "volcano.sh/job-name"
VOLCANO_TASK_LABEL = "volcano.sh/task-spec"
KUBEFLOW_JOB_LABEL = "training.kubeflow.org/job-name"
KUBEFLOW_REPLICA_LABEL = "training.kubeflow.org/replica-type"

TERMINATED_PHASES = frozenset({"Succeeded", "Failed"})
# Fields that change on every observation, not with the state: ignored when comparing.
VOLATILE_FIELDS = ("observed_at", "published_at")
ROUND_DIGITS = 9  # nano units, as Kubernetes quantities: sums in any order compare equal


class InventoryError(ValueError):
    """Input that cannot be turned into inventory (a bad quantity, annotation or selector)."""


# --- quantities -------------------------------------------------------------------------------

Quantity = str | float

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}


def parse_quantity(q: Quantity) -> float:
    """A Kubernetes resource quantity as a float: "500m" → 0.5, "2Gi" → 2147483648, 1e3 → 1000.

    Accepts the three suffix families of k8s.io/apimachinery's resource.Quantity: binary SI
    (Ki…Ei), decimal SI (n, u, m, "", k, M…E) and decimal exponents (1e3, 1E-3).
    """
    if isinstance(q, bool):
        raise InventoryError(f"not a quantity: {q!r}")
    if isinstance(q, int | float):
        if not math.isfinite(q):
            raise InventoryError(f"not a finite quantity: {q!r}")
        return float(q)
    text = q.strip()
    if not text:
        raise InventoryError("empty quantity")
    number, multiplier = text, Decimal(1)
    if text[-2:] in _BINARY:
        number, multiplier = text[:-2], Decimal(_BINARY[text[-2:]])
    elif text[-1] in _DECIMAL and not text[-1].isdigit() and text[-1] != ".":
        # "E" alone is exa; "1E3" (digits after E) is handled by Decimal as an exponent below.
        number, multiplier = text[:-1], _DECIMAL[text[-1]]
    if not number or number in "+-" or number.lstrip("+-")[:1] not in set("0123456789."):
        raise InventoryError(f"not a quantity: {q!r}")
    if any(c.isspace() for c in number) or "_" in number:
        raise InventoryError(f"not a quantity: {q!r}")
    try:
        value = Decimal(number) * multiplier
    except InvalidOperation:
        raise InventoryError(f"not a quantity: {q!r}") from None
    if not value.is_finite():
        raise InventoryError(f"not a quantity: {q!r}")
    return float(value)


def parse_resources(resources: Mapping[str, Quantity]) -> dict[str, float]:
    """A ResourceList ({"cpu": "500m", "memory": "1Gi"}) as floats."""
    out: dict[str, float] = {}
    for name, q in resources.items():
        try:
            out[name] = parse_quantity(q)
        except InventoryError as e:
            raise InventoryError(f"{name}: {e}") from None
    return out


def _add(into: dict[str, float], more: Mapping[str, float], times: float = 1.0) -> None:
    for k, v in more.items():
        into[k] = into.get(k, 0.0) + v * times


def _rounded(d: Mapping[str, float]) -> dict[str, float]:
    return {k: round(v, ROUND_DIGITS) for k, v in sorted(d.items())}


# --- Kubernetes object models (only what governor reads) ---------------------------------------


class _K(msgspec.Struct, rename="camel", omit_defaults=True):
    """Base of the partial Kubernetes models: camelCase, unknown fields ignored."""


class OwnerReference(_K):
    api_version: str = ""
    kind: str = ""
    name: str = ""
    controller: bool = False


class Meta(_K):
    name: str = ""
    namespace: str = ""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    resource_version: str = ""
    generation: int = 0
    owner_references: list[OwnerReference] = []
    deletion_timestamp: str | None = None


class LabelSelectorRequirement(_K):
    key: str
    operator: str
    values: list[str] = []


class LabelSelector(_K):
    match_labels: dict[str, str] = {}
    match_expressions: list[LabelSelectorRequirement] = []


class ResourceRequirements(_K):
    requests: dict[str, Quantity] = {}
    limits: dict[str, Quantity] = {}


class Container(_K):
    name: str = ""
    resources: ResourceRequirements = msgspec.field(default_factory=ResourceRequirements)
    restart_policy: str | None = None  # "Always" on an init container: a sidecar


class PodSpec(_K):
    node_name: str = ""
    containers: list[Container] = []
    init_containers: list[Container] = []
    overhead: dict[str, Quantity] = {}
    priority_class_name: str = ""
    priority: int | None = None


class Condition(_K):
    type: str
    status: str = "Unknown"


class PodStatus(_K):
    phase: str = ""
    conditions: list[Condition] = []


class Pod(_K):
    metadata: Meta = msgspec.field(default_factory=Meta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)
    status: PodStatus = msgspec.field(default_factory=PodStatus)


class PodTemplate(_K):
    metadata: Meta = msgspec.field(default_factory=Meta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)


class NodeSpec(_K):
    unschedulable: bool = False


class NodeStatus(_K):
    capacity: dict[str, Quantity] = {}
    allocatable: dict[str, Quantity] = {}
    conditions: list[Condition] = []


class Node(_K):
    metadata: Meta = msgspec.field(default_factory=Meta)
    spec: NodeSpec = msgspec.field(default_factory=NodeSpec)
    status: NodeStatus = msgspec.field(default_factory=NodeStatus)


class PriorityClass(_K):
    metadata: Meta = msgspec.field(default_factory=Meta)
    value: int = 0
    global_default: bool = False


# Koordinator `Device` (scheduling.koordinator.sh/v1alpha1, cluster-scoped, named after the node).


class DeviceTopology(_K):
    socket_id: int = msgspec.field(default=0, name="socketID")
    node_id: int = msgspec.field(default=0, name="nodeID")
    pcie_id: str = msgspec.field(default="", name="pcieID")
    bus_id: str = msgspec.field(default="", name="busID")


class VirtualFunction(_K):
    minor: int = 0
    bus_id: str = msgspec.field(default="", name="busID")


class VFGroup(_K):
    vfs: list[VirtualFunction] = []
    labels: dict[str, str] = {}


class DeviceInfo(_K):
    type: str = ""
    id: str = ""
    minor: int = 0
    health: bool = False
    resources: dict[str, Quantity] = {}
    topology: DeviceTopology | None = None
    vf_groups: list[VFGroup] = []


class DeviceSpec(_K):
    devices: list[DeviceInfo] = []


class DeviceObject(_K):
    metadata: Meta = msgspec.field(default_factory=Meta)
    spec: DeviceSpec = msgspec.field(default_factory=DeviceSpec)


# Pod annotations written by koord-scheduler / set by users (apis/extension/device_share.go).


class AllocationExtension(_K):
    vfs: list[VirtualFunction] = []


class DeviceAllocation(_K):
    minor: int = 0
    resources: dict[str, Quantity] = {}
    id: str = ""
    extension: AllocationExtension | None = None


DeviceAllocations = dict[str, list[DeviceAllocation | None]]


class DeviceJointAllocate(_K):
    device_types: list[str] = []
    required_scope: str = ""


_ALLOCATIONS = msgspec.json.Decoder(DeviceAllocations)
_JOINT = msgspec.json.Decoder(DeviceJointAllocate)


def parse_device_allocated(text: str) -> dict[str, list[DeviceAllocation]]:
    """The `scheduling.koordinator.sh/device-allocated` annotation: allocations by device type."""
    try:
        raw = _ALLOCATIONS.decode(text)
    except msgspec.DecodeError as e:
        raise InventoryError(f"{DEVICE_ALLOCATED}: {e}") from None
    return {t: [a for a in allocs if a is not None] for t, allocs in raw.items()}


def parse_joint_allocate(text: str) -> dict[str, Any]:
    """The `scheduling.koordinator.sh/device-joint-allocate` annotation, as its JSON object."""
    try:
        joint = _JOINT.decode(text)
    except msgspec.DecodeError as e:
        raise InventoryError(f"{DEVICE_JOINT_ALLOCATE}: {e}") from None
    out: dict[str, Any] = msgspec.to_builtins(joint)
    return out


# --- label selectors --------------------------------------------------------------------------


def selector_matches(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelector semantics. An empty selector matches everything."""
    for k, v in selector.match_labels.items():
        if labels.get(k) != v:
            return False
    for req in selector.match_expressions:
        present = req.key in labels
        op = req.operator
        if op == "In":
            if not present or labels[req.key] not in req.values:
                return False
        elif op == "NotIn":
            if present and labels[req.key] in req.values:
                return False
        elif op == "Exists":
            if not present:
                return False
        elif op == "DoesNotExist":
            if present:
                return False
        else:
            raise InventoryError(f"label selector: unknown operator {op!r}")
    return True


def selector_string(selector: LabelSelector) -> str:
    """The selector in kubectl's string form: `app=web,tier in (a,b),!canary`."""
    parts = [f"{k}={v}" for k, v in sorted(selector.match_labels.items())]
    for req in selector.match_expressions:
        values = ",".join(sorted(req.values))
        parts.append(
            {
                "In": f"{req.key} in ({values})",
                "NotIn": f"{req.key} notin ({values})",
                "Exists": req.key,
                "DoesNotExist": f"!{req.key}",
            }.get(req.operator, f"{req.key} {req.operator} ({values})")
        )
    return ",".join(parts)


def parse_selector_string(text: str) -> LabelSelector:
    """The equality-based string form used in scale subresources' status (`a=b,c=d`); set-based
    terms (`in`, `notin`, `!k`, bare `k`) are understood too."""
    labels: dict[str, str] = {}
    exprs: list[LabelSelectorRequirement] = []
    # split on commas outside parentheses
    terms, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append(cur)
            cur = ""
        else:
            cur += ch
    terms.append(cur)
    for raw in terms:
        term = raw.strip()
        if not term:
            continue
        for word, op in ((" notin ", "NotIn"), (" in ", "In")):
            if word in term:
                key, _, rest = term.partition(word)
                vals = rest.strip().removeprefix("(").removesuffix(")")
                values = [v.strip() for v in vals.split(",") if v.strip()]
                exprs.append(LabelSelectorRequirement(key.strip(), op, values))
                break
        else:
            if "!=" in term:
                key, _, val = term.partition("!=")
                exprs.append(LabelSelectorRequirement(key.strip(), "NotIn", [val.strip()]))
            elif "=" in term:
                key, _, val = term.replace("==", "=").partition("=")
                labels[key.strip()] = val.strip()
            elif term.startswith("!"):
                exprs.append(LabelSelectorRequirement(term[1:].strip(), "DoesNotExist"))
            else:
                exprs.append(LabelSelectorRequirement(term, "Exists"))
    return LabelSelector(match_labels=labels, match_expressions=exprs)


# --- pods -------------------------------------------------------------------------------------


def container_requests(c: Container) -> dict[str, float]:
    """A container's requests, each missing request taken from its limit."""
    out = parse_resources(c.resources.limits)
    out.update(parse_resources(c.resources.requests))
    return out


def pod_requests(spec: PodSpec) -> dict[str, float]:
    """The pod's effective request per resource, as the scheduler computes it (with sidecars)."""
    app: dict[str, float] = {}
    for c in spec.containers:
        _add(app, container_requests(c))
    sidecars: dict[str, float] = {}
    init_peak: dict[str, float] = {}
    for c in spec.init_containers:
        req = container_requests(c)
        if c.restart_policy == "Always":
            _add(sidecars, req)
            # a sidecar also counts while the init containers after it run
            continue
        for k, v in req.items():
            init_peak[k] = max(init_peak.get(k, 0.0), v + sidecars.get(k, 0.0))
    total = dict(app)
    _add(total, sidecars)
    for k, v in init_peak.items():
        total[k] = max(total.get(k, 0.0), v)
    _add(total, parse_resources(spec.overhead))
    return {k: v for k, v in total.items() if v}


def pod_live(pod: Pod) -> bool:
    """Holds resources on its node: not Succeeded/Failed (terminating pods still count)."""
    return pod.status.phase not in TERMINATED_PHASES


def pod_ready(pod: Pod) -> bool:
    """Running, not terminating, and its Ready condition is True."""
    if not pod_live(pod) or pod.metadata.deletion_timestamp is not None:
        return False
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions)


# --- nodes and devices ------------------------------------------------------------------------


@dataclass
class DeviceUse:
    """What the pods' device-allocated annotations hold of one device."""

    resources: dict[str, float] = field(default_factory=dict)
    vfs: int = 0
    entries: int = 0


def device_usage(
    pods: Iterable[Pod],
) -> tuple[dict[tuple[str, int], DeviceUse], list[str]]:
    """(type, minor) → what live pods hold, and one problem line per unreadable annotation."""
    use: dict[tuple[str, int], DeviceUse] = {}
    problems: list[str] = []
    for pod in pods:
        text = pod.metadata.annotations.get(DEVICE_ALLOCATED)
        if text is None or not pod_live(pod):
            continue
        try:
            allocations = parse_device_allocated(text)
            for dtype, entries in allocations.items():
                for a in entries:
                    u = use.setdefault((dtype, a.minor), DeviceUse())
                    _add(u.resources, parse_resources(a.resources))
                    u.vfs += len(a.extension.vfs) if a.extension else 0
                    u.entries += 1
        except InventoryError as e:
            problems.append(f"pod {pod.metadata.namespace}/{pod.metadata.name}: {e}")
    return use, problems


def _share(resources: Mapping[str, float], names: Sequence[str], default: float) -> float:
    for n in names:
        if n in resources:
            return resources[n]
    return default


def device_state(info: DeviceInfo, use: DeviceUse | None) -> Device | None:
    """One Koordinator device entry as an `events.Device`; None for types governor ignores."""
    dtype: DeviceType
    if info.type.lower() == "gpu":
        dtype = "gpu"
    elif info.type.lower() == "rdma":
        dtype = "rdma"
    elif info.type.lower() == "fpga":
        dtype = "fpga"
    else:
        return None
    topo = info.topology or DeviceTopology()
    resources = parse_resources(info.resources)
    used = use or DeviceUse()
    if dtype == "gpu":
        total = _share(resources, (GPU_CORE, GPU_MEMORY_RATIO), 100.0)
        held = _share(used.resources, (GPU_CORE, GPU_MEMORY_RATIO), -1.0)
        if held < 0:  # only nvidia.com/gpu in the allocation: whole GPUs
            held = used.resources.get(NVIDIA_GPU, 0.0) * 100.0
    elif dtype == "rdma":
        capacity = resources.get(RDMA, 100.0) or 100.0
        vfs = sum(len(g.vfs) for g in info.vf_groups)
        total = float(vfs) if vfs else 1.0
        held_share = used.resources.get(RDMA, 0.0) / capacity
        if vfs:
            held = float(used.vfs) if used.vfs else round(held_share * total)
        else:
            held = held_share if RDMA in used.resources else float(used.entries)
    else:
        capacity = resources.get(FPGA, 100.0) or 100.0
        total = 1.0
        held = used.resources.get(FPGA, 0.0) / capacity if FPGA in used.resources else used.entries
    return Device(
        type=dtype,
        minor=info.minor,
        healthy=info.health,
        socket=topo.socket_id,
        numa=topo.node_id,
        pcie=topo.pcie_id or "0",
        free=round(max(0.0, total - held), ROUND_DIGITS),
        total=total,
    )


def node_devices(
    device: DeviceObject | None, pods: Iterable[Pod]
) -> tuple[list[Device], list[str]]:
    """A node's GPUs, RDMA NICs and FPGAs with what is free of each, sorted by (type, minor)."""
    if device is None:
        return [], []
    use, problems = device_usage(pods)
    out: list[Device] = []
    for info in device.spec.devices:
        try:
            d = device_state(info, use.get((info.type.lower(), info.minor)))
        except InventoryError as e:
            problems.append(f"device {device.metadata.name} {info.type}/{info.minor}: {e}")
            continue
        if d is not None:
            out.append(d)
    out.sort(key=lambda d: (d.type, d.minor))
    return out, problems


def node_ready(node: Node) -> bool:
    """False when the Ready condition says False/Unknown; a node without one counts as ready."""
    for c in node.status.conditions:
        if c.type == "Ready":
            return c.status == "True"
    return True


def node_pool(node: Node, label: str = POOL_LABEL) -> str:
    return node.metadata.labels.get(label) or DEFAULT_POOL


def node_state(
    node: Node,
    pods: Iterable[Pod],
    device: DeviceObject | None,
    managed: Callable[[Pod], bool],
    now: float = 0.0,
    *,
    pool_label: str = POOL_LABEL,
) -> tuple[NodeState, list[str]]:
    """One node's capacity: allocatable, what managed and unmanaged pods request, its devices.

    `pods` are the pods bound to the node (spec.nodeName); `managed(pod)` says whether a pod
    belongs to a policy target. Returns the state and one line per input problem (a bad
    quantity or annotation is skipped, never fatal).
    """
    problems: list[str] = []
    live = sorted(
        (p for p in pods if pod_live(p)),
        key=lambda p: (p.metadata.namespace, p.metadata.name),
    )
    managed_req: dict[str, float] = {}
    unmanaged_req: dict[str, float] = {}
    for pod in live:
        try:
            req = pod_requests(pod.spec)
        except InventoryError as e:
            problems.append(f"pod {pod.metadata.namespace}/{pod.metadata.name}: {e}")
            continue
        req["pods"] = 1.0
        _add(managed_req if managed(pod) else unmanaged_req, req)
    try:
        allocatable = parse_resources(node.status.allocatable or node.status.capacity)
    except InventoryError as e:
        problems.append(f"node {node.metadata.name} allocatable: {e}")
        allocatable = {}
    devices, dev_problems = node_devices(device, live)
    return (
        NodeState(
            node=node.metadata.name,
            pool=node_pool(node, pool_label),
            allocatable=_rounded(allocatable),
            requested_unmanaged=_rounded(unmanaged_req),
            requested_managed=_rounded(managed_req),
            devices=devices,
            ready=node_ready(node),
            schedulable=not node.spec.unschedulable,
            observed_at=now,
        ),
        problems + dev_problems,
    )


# --- targets ----------------------------------------------------------------------------------


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
    pytorch_replica_specs: dict[str, _ReplicaSpec] = {}


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
    tasks: list[_VolcanoTask] = []
    priority_class_name: str = ""


class _TaskState(_K):
    phase: dict[str, int] = {}


class _VolcanoJobStatus(_K):
    state: dict[str, Any] | None = None
    task_status_count: dict[str, _TaskState] = {}
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
        a = _convert(obj, _Apps, name)
        status = a.status.ready_replicas if a.status.observed_generation is not None else None
        return TargetView(
            spec_replicas=a.spec.replicas,
            status_ready=status,
            selector=a.spec.selector,
            template=a.spec.template,
            priority_class=a.spec.template.spec.priority_class_name,
        )
    if which == "pytorchjob":
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
    if which == "volcano":
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
    # generic: a CRD with a scale subresource, read through its specReplicasPath
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
    if ready is None:
        ready = 0
        if view.selector is not None:
            ready = sum(
                1
                for p in namespace_pods
                if p.metadata.namespace == policy.metadata.namespace
                and selector_matches(view.selector, p.metadata.labels)
                and pod_ready(p)
            )
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
        ),
        problems,
    )


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


# --- policies and priorities ------------------------------------------------------------------


def policy_from_cluster(obj: Mapping[str, Any]) -> ScalingPolicy:
    """A ScalingPolicy object from the API server, validated (raises `PolicyError`).

    The resourceVersion is dropped: it moves with every status write, which is not a change of
    the policy (its generation is).
    """
    policy = policy_from_obj(obj)
    return msgspec.structs.replace(
        policy, metadata=msgspec.structs.replace(policy.metadata, resource_version=None)
    )


def priority_is_set(obj: Mapping[str, Any]) -> bool:
    spec = obj.get("spec")
    return isinstance(spec, Mapping) and spec.get("priority") is not None


def resolve_priority(
    policy: ScalingPolicy,
    explicit: bool,
    class_name: str,
    classes: Mapping[str, PriorityClass],
) -> ScalingPolicy:
    """Fill an unset `spec.priority` from the target's PriorityClass (see the module doc)."""
    if explicit:
        return policy
    chosen = classes.get(class_name) if class_name else None
    if chosen is None and not class_name:
        defaults = sorted(
            (c for c in classes.values() if c.global_default), key=lambda c: c.metadata.name
        )
        chosen = defaults[0] if defaults else None
    if chosen is None:
        return policy
    annotations = dict(policy.metadata.annotations)
    annotations[PRIORITY_FROM_ANNOTATION] = f"PriorityClass/{chosen.metadata.name}"
    return msgspec.structs.replace(
        policy,
        spec=msgspec.structs.replace(policy.spec, priority=chosen.value),
        metadata=msgspec.structs.replace(policy.metadata, annotations=annotations),
    )


def policy_record(
    obj: Mapping[str, Any],
    view: TargetView | None,
    classes: Mapping[str, PriorityClass],
    now: float = 0.0,
) -> PolicyRecord:
    """The policies-topic record of a ScalingPolicy object (raises `PolicyError` if invalid)."""
    policy = policy_from_cluster(obj)
    class_name = view.priority_class if view is not None else ""
    policy = resolve_priority(policy, priority_is_set(obj), class_name, classes)
    return PolicyRecord(policy=policy, published_at=now, origin="cluster")


# --- change detection -------------------------------------------------------------------------

E = TypeVar("E", bound=Event)


@functools.cache
def _volatile_defaults(typ: type[Any]) -> dict[str, Any]:
    return {f.name: f.default for f in msgspec.structs.fields(typ) if f.name in VOLATILE_FIELDS}


def content(value: E) -> E:
    """The message without its observation timestamps: what "a change" is measured on."""
    zero = _volatile_defaults(type(value))
    return msgspec.structs.replace(value, **zero) if zero else value


def worth_publishing(last: Event | None, new: Event | None) -> bool:
    """True when `new` differs from the last published value of its key (None = tombstone)."""
    if last is None or new is None:
        return (last is None) != (new is None)
    return type(last) is not type(new) or content(last) != content(new)


# --- pool summary (governor cluster show) -----------------------------------------------------


@dataclass
class NodeSummary:
    node: str
    pool: str
    ready: bool
    schedulable: bool
    allocatable: dict[str, float]
    managed: dict[str, float]
    unmanaged: dict[str, float]
    gpus: int = 0
    gpus_healthy: int = 0
    gpus_free: int = 0  # healthy GPUs with nothing allocated
    gpu_core_free: float = 0.0  # healthy gpu-core left, 100 per GPU
    nics: int = 0
    nics_healthy: int = 0
    nics_free: int = 0  # healthy NICs with capacity left

    @property
    def free(self) -> dict[str, float]:
        out = dict(self.allocatable)
        _add(out, self.managed, -1)
        _add(out, self.unmanaged, -1)
        return _rounded(out)


@dataclass
class PoolSummary:
    pool: str | None
    nodes: list[NodeSummary]
    totals: NodeSummary


def summarize_node(n: NodeState) -> NodeSummary:
    s = NodeSummary(
        n.node,
        n.pool,
        n.ready,
        n.schedulable,
        dict(n.allocatable),
        dict(n.requested_managed),
        dict(n.requested_unmanaged),
    )
    for d in n.devices:
        if d.type == "gpu":
            s.gpus += 1
            s.gpus_healthy += d.healthy
            s.gpus_free += d.healthy and d.free >= d.total
            s.gpu_core_free += d.free if d.healthy else 0.0
        elif d.type == "rdma":
            s.nics += 1
            s.nics_healthy += d.healthy
            s.nics_free += d.healthy and d.free > 0
    return s


def summarize_pool(nodes: Iterable[NodeState], pool: str | None = None) -> PoolSummary:
    """Per-node rows and totals of one pool (or of every node when `pool` is None)."""
    rows = sorted(
        (summarize_node(n) for n in nodes if pool is None or n.pool == pool),
        key=lambda s: (s.pool, s.node),
    )
    total = NodeSummary("TOTAL", pool or "*", True, True, {}, {}, {})
    for r in rows:
        total.ready = total.ready and r.ready
        _add(total.allocatable, r.allocatable)
        _add(total.managed, r.managed)
        _add(total.unmanaged, r.unmanaged)
        for f in ("gpus", "gpus_healthy", "gpus_free", "nics", "nics_healthy", "nics_free"):
            setattr(total, f, getattr(total, f) + getattr(r, f))
        total.gpu_core_free += r.gpu_core_free
    total.allocatable = _rounded(total.allocatable)
    total.managed = _rounded(total.managed)
    total.unmanaged = _rounded(total.unmanaged)
    return PoolSummary(pool, rows, total)
