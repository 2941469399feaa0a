"""The Kubernetes objects governor reads, as small msgspec models: only the fields governor
reads, unknown fields ignored; and the Koordinator device annotations.
"""

from __future__ import annotations

from typing import Any

import msgspec

from governor.inventory.names import DEVICE_ALLOCATED, DEVICE_JOINT_ALLOCATE, InventoryError
from governor.inventory.quantities import Quantity


class _K(msgspec.Struct, rename="camel", omit_defaults=True):
    """Base of the partial Kubernetes models: camelCase, unknown fields ignored."""


K8sObject = _K  # its public name, for the models outside this package (governor.targets)


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
    creation_timestamp: str | None = None


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
    last_transition_time: str | None = None


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
