"""The contract: every Kafka topic, its msgspec type and its key.

Others subscribe to these topics, so this module is a public API. The evolution rule:

* a new field is always optional, with a default, and is appended after the existing ones;
* a field is never renamed, retyped or removed within a schema version;
* readers ignore fields they do not know (msgspec's default), so an old reader reads a newer
  message, and a newer reader fills defaults when reading an older one;
* a breaking change bumps SCHEMA_VERSION (carried in every message's headers) and gets new topics.

Timestamps are epoch seconds (float, UTC). Workload ids are `namespace/kind/name`.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from governor.spec import ScalingPolicy, TargetRef
from governor.topic import PRINCIPALS as PRINCIPALS
from governor.topic import Access as Access
from governor.topic import Principal as Principal
from governor.topic import Topic as Topic

SCHEMA_VERSION = 1


class Event(msgspec.Struct, omit_defaults=True, kw_only=True, gc=False):
    """Base of every wire type.

    `gc=False`: events are acyclic data off the wire, so the cyclic collector need not track
    them. A consumer holds a fetch of ~2,000 decoded events at a time; tracked, they trigger
    young-generation collections that cost about a third of the bus's per-message time."""


# --- samples and windows ----------------------------------------------------------------------


class MetricSample(Event, tag_field="kind", tag="sample"):
    """One observation of one metric of one workload (topic governor.metrics, key: workload).
    The `kind` tag tells it from a MetricBatch; a record without one (apps) is a sample."""

    workload: str
    metric: str
    value: float
    timestamp: float
    unit: str = ""
    source: str = ""
    labels: dict[str, str] = msgspec.field(default_factory=dict)


class MetricBatch(Event, tag_field="kind", tag="batch"):
    """Samples of one partition in one record of governor.metrics (the collector's, one per
    partition per flush; keyed `partition:<n>`): `governor.metric_records` has the rules."""

    partition: int
    samples: list[MetricSample]


MetricRecord = MetricSample | MetricBatch  # governor.metrics: a tagged union on `kind`

WindowKind = Literal["stable", "panic"]


class WindowView(Event):
    """A series' aggregate over [start, end) in event time; not `closed`: the open estimate."""

    window: WindowKind
    start: float
    end: float
    count: int
    mean: float
    max: float
    p95: float
    newest_sample: float
    closed: bool = True
    # Per-pod series (samples labelled `pod`): the statistics over the window's instants of the
    # sum across pods of one instant (`governor.pod_totals`); instants 0: not a per-pod series.
    instants: int = 0
    total_mean: float = 0.0
    total_max: float = 0.0
    total_p95: float = 0.0


class LoadWindow(WindowView, kw_only=True):
    """A workload metric's window (topic governor.load, key: workload); `more`: the series'
    other windows of the moment (`governor.windows.views`); old readers see the first."""

    workload: str
    metric: str
    more: list[WindowView] = msgspec.field(default_factory=list)


# --- cluster side -----------------------------------------------------------------------------


class WorkloadState(Event):
    """Observed state of a scaling target (topic governor.workloads, compacted, key: workload)."""

    workload: str
    spec_replicas: int
    ready_replicas: int
    observed_at: float
    # Per-replica requests from the pod template: cpu (cores), memory (bytes), nvidia.com/gpu, ...
    requests: dict[str, float] = msgspec.field(default_factory=dict)
    selector: str = ""
    pool: str = ""
    # scheduling.koordinator.sh/device-joint-allocate, e.g. {"deviceTypes":["gpu","rdma"],...}
    joint_allocate: dict[str, Any] | None = None
    # Training jobs: how many times the job restarted (membership changes) and when it started.
    restarts: int = 0
    started_at: float | None = None
    # How long new replicas took from requested (pod creationTimestamp) to Ready: running
    # median and p90 over the recent ones, seconds; None until one has been seen.
    startup_p50_seconds: float | None = None
    startup_p90_seconds: float | None = None


DeviceType = Literal["gpu", "rdma", "fpga"]


class Device(Event):
    """One device on a node, with Koordinator's topology and what is still free of it."""

    type: DeviceType
    minor: int
    healthy: bool = True
    socket: int = 0
    numa: int = 0
    pcie: str = "0"
    # Free share of the device: gpu-core 0..100, rdma 0..1 (VF count or 1), after pods' allocations.
    free: float = 1.0
    total: float = 1.0


class NodeState(Event):
    """One node's capacity (topic governor.cluster, compacted, key: node name)."""

    node: str
    pool: str
    allocatable: dict[str, float]
    requested_unmanaged: dict[str, float] = msgspec.field(default_factory=dict)
    requested_managed: dict[str, float] = msgspec.field(default_factory=dict)
    devices: list[Device] = msgspec.field(default_factory=list)
    ready: bool = True
    schedulable: bool = True
    observed_at: float = 0.0


class QuotaState(Event):
    """A namespace ResourceQuota (topic governor.quotas, compacted, key: namespace/name).

    Resource names are the quota's own: `requests.cpu` (or `cpu`), `limits.memory`, `pods`,
    `count/pods`, `requests.nvidia.com/gpu`, ... `covers` holds, for every scaled workload the
    quota's namespace and scopes select, what ONE replica takes of each of the quota's resources;
    `unmanaged` what the live pods governor does not scale hold of it (the collector sums them
    from the pods it sees, so a replica that failed creation never counts). `used` is the quota
    controller's status.used, shown to people; allocation reads `hard`, `unmanaged`, `covers`.
    """

    quota: str  # namespace/name
    namespace: str
    hard: dict[str, float]
    used: dict[str, float] = msgspec.field(default_factory=dict)
    unmanaged: dict[str, float] = msgspec.field(default_factory=dict)
    covers: dict[str, dict[str, float]] = msgspec.field(default_factory=dict)
    # spec.scopes, and the PriorityClass names of a scopeSelector (None: no such selector)
    scopes: list[str] = msgspec.field(default_factory=list)
    priority_classes: list[str] | None = None
    observed_at: float = 0.0


class QueueState(Event):
    """A Volcano Queue, scheduling.volcano.sh/v1beta1 (topic governor.queues, compacted, key: name).

    Resources are named as in a pod's requests (cpu in cores, memory in bytes, nvidia.com/gpu).
    `covers`: per scaled workload of the queue (a Volcano Job's spec.queue, a PodGroup's queue),
    one replica's requests; `unmanaged`: what live pods of the queue that governor does not scale
    request. `parent` is set where Volcano's hierarchical queues are enabled.
    """

    queue: str
    capability: dict[str, float] = msgspec.field(default_factory=dict)
    deserved: dict[str, float] = msgspec.field(default_factory=dict)
    guarantee: dict[str, float] = msgspec.field(default_factory=dict)
    weight: int = 1
    reclaimable: bool = True
    parent: str = ""
    state: str = "Open"
    allocated: dict[str, float] = msgspec.field(default_factory=dict)  # status.allocated
    unmanaged: dict[str, float] = msgspec.field(default_factory=dict)
    covers: dict[str, dict[str, float]] = msgspec.field(default_factory=dict)
    observed_at: float = 0.0


# --- decisions --------------------------------------------------------------------------------

Rule = Literal[
    "metric",  # the raw desired count from a metric (the max over metrics wins)
    "tolerance",  # the ratio was within the tolerance band: no change
    "stabilization",  # held by the stabilization window
    "rate_limit",  # held by a scaleUp/scaleDown policy
    "disabled",  # selectPolicy Disabled
    "min",  # clamped up to minReplicas
    "max",  # clamped down to maxReplicas
    "cap",  # clamped by replicaCap (e.g. partitions)
    "panic",  # panic mode: scale on the short window, no scale-down
    "scale_to_zero",  # went to / stayed at zero after the cooldown
    "activation",  # at zero, below the activation threshold
    "stale_hold",  # data missing or stale: no scale-down
    "fallback",  # failure threshold reached: fallback replicas
    "no_workload_state",  # nothing known of the target yet: no action
    "readiness",  # unready pods counted per HPA's readiness rules
    "capacity",  # the pool could not give more
    "priority",  # taken by or kept for a higher tier
    "fair_share",  # weighted DRF inside a tier
    "floor",  # the elastic / gang / min floor
    "device_fit",  # no node can place another replica's devices
    "restart_damping",  # an elastic job resize was not worth its restart
    "hysteresis",  # the previous allocation was kept (demand moved less than the margin)
    "unchanged",  # nothing asked for a change
    "forecast",  # the forecast's floor raised the count (predictive headroom)
    "event_reduction",  # a scale-down waited: the forecast's upper bound, or too small a step
]


class Reason(Event):
    rule: Rule
    detail: str = ""
    metric: str | None = None
    value: float | None = None
    # The quota or queue that bound a capacity decision: "quota:<ns>/<name>" | "queue:<name>".
    limit: str = ""


class MetricInput(Event):
    """What a decision saw of one metric."""

    metric: str
    value: float | None
    target: float
    target_type: str
    newest_sample: float | None = None
    desired: int | None = None
    stale: bool = False


class Recommendation(Event):
    """Stage 1 output: one workload's damped desire (topic governor.recommendations, key: pool)."""

    workload: str
    pool: str
    desired: int
    current: int
    ready: int
    min_replicas: int
    max_replicas: int
    floor: int
    priority: int
    weight: float
    requests: dict[str, float]
    elastic: bool
    reasons: list[Reason]
    inputs: list[MetricInput]
    newest_input: float
    policy_generation: int
    computed_at: float
    joint_allocate: dict[str, Any] | None = None
    # Elastic training jobs: the throughput stage 1 measured at `current` replicas (all ready),
    # for the stage that holds the restart-damping state (it decides the resizes).
    throughput: float | None = None
    # Pass-through (`governor.cores.decider_handover`): stage 1 decided this evaluation itself
    # (its pool has no inventory); published for the topic's readers, stage 2 decides nothing.
    decided: bool = False
    # Stage 1's decision memory at this evaluation (seq, last target, when, newest input): a
    # stage 2 taking the workload over from pass-through starts above it, so seq only grows.
    last_seq: int = 0
    last_to: int | None = None
    last_decided_at: float = 0.0
    last_newest_input: float = 0.0


class ScaleDecision(Event):
    """Stage 2 output: what the actuator should do (topic governor.decisions, key: workload)."""

    decision_id: str
    workload: str
    seq: int
    from_replicas: int
    to_replicas: int
    reasons: list[Reason]
    inputs: list[MetricInput]
    policy_generation: int
    newest_input: float
    decided_at: float
    pool: str = "default"
    target: TargetRef | None = None
    policy: str = ""  # namespace/name of the ScalingPolicy
    min_available: int | None = None  # Volcano: the floor, when the policy moves minAvailable
    # When stage 1 evaluated this input (the recommendation's computed_at; < decided_at if split)
    evaluated_at: float = 0.0


# "replay": the decision was already applied (the target's fence holds its seq and digest), e.g.
# redelivered to an actuator after the one that patched it died before committing; no patch.
ActuationOutcome = Literal["applied", "refused", "failed", "dry_run", "noop", "replay"]


class Actuation(Event):
    """The actuator's audit record (topic governor.actuations, key: workload)."""

    decision_id: str
    workload: str
    seq: int
    outcome: ActuationOutcome
    reason: str
    from_replicas: int | None = None
    to_replicas: int | None = None
    at: float = 0.0
    resource_version: str | None = None


class Shortfall(Event):
    """Capacity a pool could not give (topic governor.shortfalls, key: pool)."""

    workload: str
    pool: str
    wanted: int
    granted: int
    resources: dict[str, float]
    reason: str
    at: float
    limit: str = ""  # the binding quota or queue ("quota:<ns>/<name>" | "queue:<name>"), if any


PolicyOrigin = Literal["file", "cluster"]


class PolicyRecord(Event):
    """A ScalingPolicy on the policies topic (compacted, key: namespace/name; tombstone deletes).

    `origin` says which source of truth wrote it: `governor policies apply` ("file") or the
    cluster-side collector from ScalingPolicy objects ("cluster"). A deployment uses one; readers
    configured for the other ignore the record.
    """

    policy: ScalingPolicy
    published_at: float = 0.0
    origin: PolicyOrigin = "file"


class DeciderCheckpoint(Event):
    """The decider's per-workload memory (topic governor.decider-state, compacted, key: workload).

    Internal to governor, not a contract for subscribers: `scale_state` is the msgpack encoding of
    `governor.policy.types.ScaleState`. Written and acknowledged BEFORE the decision it allows, so
    after a crash the seq only moves forward and no decision goes back to an older input.
    """

    workload: str
    seq: int
    last_to: int | None = None
    last_decided_at: float = 0.0
    last_newest_input: float = 0.0
    scale_state: bytes = b""
    updated_at: float = 0.0
    # Elastic training jobs: msgpack of `governor.policy.elastic.ElasticState` (last resize, ...).
    elastic_state: bytes = b""
    # A pool's checkpoint (workload = "pool:<name>"): msgpack of its last
    # `governor.policy.allocate.Allocation`, handed back to `allocate` as `previous`.
    allocation: bytes = b""
    # A Shadow policy's memory (namespace/name of the policy; governor.shadow): its own key,
    # so that a shadow never overwrites the Active policy's state or seq.
    policy: str = ""


class CollectorMember(Event):
    """A collector's share of the pull sources (topic governor.collector-sources, key: the
    member), written at each assignment of the collectors' group: a pull source runs where the
    partition of `workload/metric` went (governor_collector.share)."""

    collector: str
    partitions: list[int]
    at: float


# --- the table --------------------------------------------------------------------------------

# The rows' shape and the principals: governor.topic (re-exported here, where readers look).
METRICS: Topic[MetricSample] = Topic(
    "governor.metrics",
    MetricSample,
    lambda m: m.workload,
    "workload (a MetricBatch: partition:<n>, each sample's workload on partition n)",
    writers=("collector", "metrics-producer"),
    readers=("aggregator",),
    groups=(("aggregator", "governor-aggregator"),),  # faust's group is its app id
    wire_type=MetricRecord,
)
LOAD: Topic[LoadWindow] = Topic(
    "governor.load",
    LoadWindow,
    lambda w: w.workload,
    "workload",
    writers=("aggregator",),
    # the metrics adapter reads it group-less, from the newest offsets
    readers=("decider", "viewer", "metrics-adapter"),
    groups=(("decider", "governor-decider"),),
)
POLICIES: Topic[PolicyRecord] = Topic(
    "governor.policies",
    PolicyRecord,
    lambda p: p.policy.key,
    "namespace/name of the policy",
    compacted=True,
    partitions=1,
    retention_ms=None,
    # `governor policies apply` (no cluster) writes as admin
    writers=("cluster-collector",),
    # the aggregator reads it group-less: each workload's windows (governor.window_sizes)
    readers=("collector", "cluster-collector", "decider", "aggregator"),
)
WORKLOADS: Topic[WorkloadState] = Topic(
    "governor.workloads",
    WorkloadState,
    lambda w: w.workload,
    "workload",
    compacted=True,
    retention_ms=None,
    writers=("cluster-collector",),
    readers=("cluster-collector", "decider"),
)
CLUSTER: Topic[NodeState] = Topic(
    "governor.cluster",
    NodeState,
    lambda n: n.node,
    "node name",
    compacted=True,
    partitions=1,
    retention_ms=None,
    writers=("cluster-collector",),
    readers=("cluster-collector", "decider"),
)
QUOTAS: Topic[QuotaState] = Topic(
    "governor.quotas",
    QuotaState,
    lambda q: q.quota,
    "namespace/name of the ResourceQuota",
    compacted=True,
    partitions=1,
    retention_ms=None,
    writers=("cluster-collector",),
    readers=("cluster-collector", "decider"),
)
QUEUES: Topic[QueueState] = Topic(
    "governor.queues",
    QueueState,
    lambda q: q.queue,
    "Volcano Queue name",
    compacted=True,
    partitions=1,
    retention_ms=None,
    writers=("cluster-collector",),
    readers=("cluster-collector", "decider"),
)
RECOMMENDATIONS: Topic[Recommendation] = Topic(
    "governor.recommendations",
    Recommendation,
    lambda r: r.pool,
    "pool",
    writers=("decider",),
    readers=("decider", "viewer"),
    groups=(("decider", "governor-decider"),),
)
DECISIONS: Topic[ScaleDecision] = Topic(
    "governor.decisions",
    ScaleDecision,
    lambda d: d.workload,
    "workload",
    writers=("decider",),
    readers=("actuator", "viewer"),
    groups=(("actuator", "governor-actuator"),),
)
# What each Shadow policy would have decided (its `policy` names it; seq per (workload, policy)).
# Never actuated: the actuator has no right to read it.
SHADOW_DECISIONS: Topic[ScaleDecision] = Topic(
    "governor.shadow-decisions",
    ScaleDecision,
    lambda d: d.workload,
    "workload",
    writers=("decider",),
    readers=("viewer",),
)
ACTUATIONS: Topic[Actuation] = Topic(
    "governor.actuations",
    Actuation,
    lambda a: a.workload,
    "workload",
    writers=("actuator",),
    readers=("viewer",),
)
SHORTFALLS: Topic[Shortfall] = Topic(
    "governor.shortfalls",
    Shortfall,
    lambda s: s.pool,
    "pool",
    writers=("decider",),
    readers=("viewer",),
)

DECIDER_STATE: Topic[DeciderCheckpoint] = Topic(
    "governor.decider-state",
    DeciderCheckpoint,
    lambda c: f"{c.workload}#{c.policy}" if c.policy else c.workload,
    "workload (a Shadow policy's: workload#namespace/name of the policy)",
    compacted=True,
    retention_ms=None,
    # Every workload's checkpoint is rewritten every few seconds: a segment a minute keeps what a
    # new owner reads at an assignment near one record per key (`Topic.segment_ms`).
    segment_ms=60_000,
    writers=("decider",),
    readers=("decider",),
)

COLLECTOR_SOURCES: Topic[CollectorMember] = Topic(
    "governor.collector-sources",
    CollectorMember,
    lambda m: m.collector,
    "collector member id",
    partitions=12,  # the unit of the split: more than collectors, so that each gets a share
    retention_ms=24 * 3600 * 1000,
    writers=("collector",),
    readers=("collector", "viewer"),
    groups=(("collector", "governor-collector"),),
)

TOPICS: tuple[Topic[Any], ...] = (
    METRICS,
    LOAD,
    POLICIES,
    WORKLOADS,
    CLUSTER,
    RECOMMENDATIONS,
    DECISIONS,
    SHADOW_DECISIONS,
    ACTUATIONS,
    SHORTFALLS,
    DECIDER_STATE,
    QUOTAS,
    QUEUES,
    COLLECTOR_SOURCES,
)

# The aggregator's faust app (id `governor-aggregator`) declares its own internal topics: the
# changelog of its series table and the assignor's leader topic. They carry no governor type.
AGGREGATOR_APP_ID = "governor-aggregator"
AGGREGATOR_TABLE = "governor-aggregator-series"
_AGGREGATOR: tuple[Principal, ...] = ("aggregator",)
FAUST_TOPICS: tuple[Access, ...] = tuple(
    Access(name, writers=_AGGREGATOR, readers=_AGGREGATOR, creators=_AGGREGATOR)
    for name in (
        f"{AGGREGATOR_APP_ID}-{AGGREGATOR_TABLE}-changelog",
        f"{AGGREGATOR_APP_ID}-__assignor-__leader",
    )
)


def access_table() -> tuple[Access, ...]:
    """Every topic governor uses, with who may write, read and create it: the contract's
    topics, their dead-letter topics and faust's internal ones."""
    return (*(t.access for t in TOPICS), *(t.dlq_access for t in TOPICS), *FAUST_TOPICS)


def topic_by_name(name: str) -> Topic[Any]:
    for t in TOPICS:
        if t.name == name:
            return t
    raise KeyError(f"unknown topic {name!r}; known: {', '.join(t.name for t in TOPICS)}")
