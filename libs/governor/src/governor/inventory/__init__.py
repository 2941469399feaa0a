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

from governor.inventory.diffing import (
    content,
    worth_publishing,
)
from governor.inventory.names import (
    DEFAULT_POOL,
    DEVICE_ALLOCATED,
    DEVICE_JOINT_ALLOCATE,
    FPGA,
    GPU_CORE,
    GPU_MEMORY_RATIO,
    KUBEFLOW_JOB_LABEL,
    KUBEFLOW_REPLICA_LABEL,
    NVIDIA_GPU,
    POOL_LABEL,
    PRIORITY_FROM_ANNOTATION,
    RDMA,
    ROUND_DIGITS,
    TERMINATED_PHASES,
    VOLATILE_FIELDS,
    InventoryError,
)
from governor.inventory.nodes import (
    DeviceUse,
    device_state,
    device_usage,
    node_devices,
    node_pool,
    node_ready,
    node_state,
)
from governor.inventory.objects import (
    AllocationExtension,
    Condition,
    Container,
    DeviceAllocation,
    DeviceAllocations,
    DeviceInfo,
    DeviceJointAllocate,
    DeviceObject,
    DeviceSpec,
    DeviceTopology,
    LabelSelector,
    LabelSelectorRequirement,
    Meta,
    Node,
    NodeSpec,
    NodeStatus,
    OwnerReference,
    Pod,
    PodSpec,
    PodStatus,
    PodTemplate,
    PriorityClass,
    ResourceRequirements,
    VFGroup,
    VirtualFunction,
    parse_device_allocated,
    parse_joint_allocate,
)
from governor.inventory.pods import (
    container_requests,
    pod_live,
    pod_ready,
    pod_requests,
)
from governor.inventory.priorities import (
    policy_from_cluster,
    policy_record,
    priority_is_set,
    resolve_priority,
)
from governor.inventory.quantities import (
    Quantity,
    parse_quantity,
    parse_resources,
)
from governor.inventory.selectors import (
    parse_selector_string,
    selector_matches,
    selector_string,
)
from governor.inventory.summary import (
    NodeSummary,
    PoolSummary,
    summarize_node,
    summarize_pool,
)
from governor.inventory.targets import managed_matcher, workload_state

__all__ = [
    "DEFAULT_POOL",
    "DEVICE_ALLOCATED",
    "DEVICE_JOINT_ALLOCATE",
    "FPGA",
    "GPU_CORE",
    "GPU_MEMORY_RATIO",
    "KUBEFLOW_JOB_LABEL",
    "KUBEFLOW_REPLICA_LABEL",
    "NVIDIA_GPU",
    "POOL_LABEL",
    "PRIORITY_FROM_ANNOTATION",
    "RDMA",
    "ROUND_DIGITS",
    "TERMINATED_PHASES",
    "VOLATILE_FIELDS",
    "AllocationExtension",
    "Condition",
    "Container",
    "DeviceAllocation",
    "DeviceAllocations",
    "DeviceInfo",
    "DeviceJointAllocate",
    "DeviceObject",
    "DeviceSpec",
    "DeviceTopology",
    "DeviceUse",
    "InventoryError",
    "LabelSelector",
    "LabelSelectorRequirement",
    "Meta",
    "Node",
    "NodeSpec",
    "NodeStatus",
    "NodeSummary",
    "OwnerReference",
    "Pod",
    "PodSpec",
    "PodStatus",
    "PodTemplate",
    "PoolSummary",
    "PriorityClass",
    "Quantity",
    "ResourceRequirements",
    "VFGroup",
    "VirtualFunction",
    "container_requests",
    "content",
    "device_state",
    "device_usage",
    "managed_matcher",
    "node_devices",
    "node_pool",
    "node_ready",
    "node_state",
    "parse_device_allocated",
    "parse_joint_allocate",
    "parse_quantity",
    "parse_resources",
    "parse_selector_string",
    "pod_live",
    "pod_ready",
    "pod_requests",
    "policy_from_cluster",
    "policy_record",
    "priority_is_set",
    "resolve_priority",
    "selector_matches",
    "selector_string",
    "summarize_node",
    "summarize_pool",
    "workload_state",
    "worth_publishing",
]
