"""Nodes and their devices: capacity, what live pods hold, health and topology -> NodeState."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from governor.events import (
    Device,
    DeviceType,
    NodeState,
)
from governor.inventory.names import (
    DEFAULT_POOL,
    DEVICE_ALLOCATED,
    FPGA,
    GPU_CORE,
    GPU_MEMORY_RATIO,
    NVIDIA_GPU,
    POOL_LABEL,
    RDMA,
    ROUND_DIGITS,
    InventoryError,
)
from governor.inventory.objects import (
    DeviceInfo,
    DeviceObject,
    DeviceTopology,
    Node,
    Pod,
    parse_device_allocated,
)
from governor.inventory.pods import pod_live, pod_requests
from governor.inventory.quantities import _add, _rounded, parse_resources


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
