"""A cluster scenario's YAML (`ScenarioSpec`) and what it builds: each workload's
ScalingPolicy, the pool's NodeStates, a failure applied to a node, the load at a second.
`governor_tools.sim.scenario` checks and plays it."""

from typing import Any, Literal

import msgspec

from governor.events import Device, NodeState
from governor.spec import ScalingPolicy, policy_from_obj
from governor_tools.sim.scenario_limits import (
    QueueSpec,
    QuotaSpec,
)

METRIC = "load"
NAMESPACE = "sim"


class ScenarioError(ValueError):
    """A scenario that cannot run as written; the message names the field."""


class _Cfg(msgspec.Struct, rename="camel", forbid_unknown_fields=True, omit_defaults=True):
    pass


class NodeSpec(_Cfg):
    name: str
    count: int = 1  # expands to name-0, name-1, ... when > 1
    allocatable: dict[str, float] = msgspec.field(
        default_factory=lambda: {"cpu": 64.0, "memory": 512e9}
    )
    gpus: int = 0
    nics: int = 0
    nic_vfs: int = 8  # SR-IOV virtual functions per NIC (replicas that can share it)
    pcie_switches: int = 1
    numa_nodes: int = 1


class WorkloadSpec(_Cfg):
    name: str
    kind: Literal["service", "training"]
    policy: dict[str, Any]  # a ScalingPolicy spec (camelCase); its one metric is named "load"
    trace: list[tuple[float, float]]  # (seconds from start, load) held until the next point
    requests: dict[str, float] = msgspec.field(default_factory=dict)
    joint_allocate: dict[str, Any] | None = None
    capacity_per_replica: float = 1.0  # services: load one ready replica serves
    startup_seconds: float | None = None
    restart_seconds: float | None = None  # training: lost per restart (default: policy δ)
    started_ago_seconds: float = 3600.0  # training: the job's age at the start
    namespace: str = ""  # default: "sim"
    queue: str | None = None  # the Volcano queue it runs in (scenario `queues`)
    limits: dict[str, float] = msgspec.field(default_factory=dict)  # per replica, for limits.*


class FailureSpec(_Cfg):
    at: float
    node: str
    kind: Literal["node_down", "node_up", "gpu_unhealthy", "nic_unhealthy", "device_healthy"]
    minor: int | None = None


class ScenarioSpec(_Cfg):
    nodes: list[NodeSpec]
    workloads: list[WorkloadSpec]
    duration_seconds: float
    name: str = "scenario"
    pool: str = "default"
    tick_seconds: float = 5.0
    startup_seconds: float = 30.0
    failures: list[FailureSpec] = msgspec.field(default_factory=list)
    start: float = 1_800_000_000.0  # epoch seconds of t = 0
    quotas: list[QuotaSpec] = msgspec.field(default_factory=list)  # namespace ResourceQuotas
    queues: list[QueueSpec] = msgspec.field(default_factory=list)  # Volcano Queues


def node_names(spec: ScenarioSpec) -> list[str]:
    return [n for ns in spec.nodes for n in _expand(ns)]


def _expand(ns: NodeSpec) -> list[str]:
    return [ns.name] if ns.count == 1 else [f"{ns.name}-{i}" for i in range(ns.count)]


def policy(spec: ScenarioSpec, w: WorkloadSpec) -> ScalingPolicy:
    body = dict(w.policy)
    body.setdefault("targetRef", {"kind": "Deployment", "name": w.name})
    body["pool"] = spec.pool
    try:
        p = policy_from_obj(
            {
                "apiVersion": "governor.dev/v1alpha1",
                "kind": "ScalingPolicy",
                "metadata": {"name": w.name, "namespace": w.namespace or NAMESPACE},
                "spec": body,
            }
        )
    except ValueError as e:
        raise ScenarioError(f"workloads[{w.name}].policy: {e}") from None
    if [m.name for m in p.spec.metrics] != [METRIC]:
        raise ScenarioError(f"workloads[{w.name}].policy: give it one metric named {METRIC!r}")
    if w.kind == "training" and p.spec.elastic is None:
        raise ScenarioError(f"workloads[{w.name}].policy: a training job needs spec.elastic")
    return p


def build_nodes(spec: ScenarioSpec) -> dict[str, NodeState]:
    out: dict[str, NodeState] = {}
    for ns in spec.nodes:
        switches = max(1, ns.pcie_switches)
        numas = max(1, min(ns.numa_nodes, switches))
        devices: list[Device] = []
        for kind, n in (("gpu", ns.gpus), ("rdma", ns.nics)):
            amount = 1.0 if kind == "gpu" else float(max(1, ns.nic_vfs))
            for minor in range(n):
                sw = minor * switches // max(n, 1)
                devices.append(
                    Device(
                        type="gpu" if kind == "gpu" else "rdma",
                        minor=minor,
                        numa=sw * numas // switches,
                        pcie=str(sw),
                        free=amount,
                        total=amount,
                    )
                )
        for name in _expand(ns):
            out[name] = NodeState(
                node=name, pool=spec.pool, allocatable=dict(ns.allocatable), devices=devices
            )
    return out


def apply_failure(node: NodeState, f: FailureSpec) -> NodeState:
    if f.kind == "node_down":
        return msgspec.structs.replace(node, ready=False)
    if f.kind == "node_up":
        return msgspec.structs.replace(node, ready=True)
    kind = "gpu" if f.kind == "gpu_unhealthy" else "rdma" if f.kind == "nic_unhealthy" else None
    devices = []
    for d in node.devices:
        hit = d.minor == f.minor and (kind is None or d.type == kind)
        if hit or (f.minor is None and kind is not None and d.type == kind):
            d = msgspec.structs.replace(d, healthy=f.kind == "device_healthy")
        devices.append(d)
    return msgspec.structs.replace(node, devices=devices)


def load_at(trace: list[tuple[float, float]], t: float) -> float:
    value = trace[0][1]
    for at, v in trace:
        if at > t:
            break
        value = v
    return value
