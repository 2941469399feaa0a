"""The names governor reads in Kubernetes objects (labels, annotations, resources)
and the error for input that cannot become inventory.
"""

from __future__ import annotations

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

# Kubeflow labels its pods with these (training.kubeflow.org/job-name, replica-type — lower case
# in training-operator v1; a Volcano Job's are in governor/targets/volcano.py).
KUBEFLOW_JOB_LABEL = "training.kubeflow.org/job-name"
KUBEFLOW_REPLICA_LABEL = "training.kubeflow.org/replica-type"

TERMINATED_PHASES = frozenset({"Succeeded", "Failed"})
# Fields that change on every observation, not with the state: ignored when comparing.
VOLATILE_FIELDS = ("observed_at", "published_at")
ROUND_DIGITS = 9  # nano units, as Kubernetes quantities: sums in any order compare equal


class InventoryError(ValueError):
    """Input that cannot be turned into inventory (a bad quantity, annotation or selector)."""
