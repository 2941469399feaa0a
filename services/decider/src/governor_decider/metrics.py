"""The decider's Prometheus metrics (docs/metrics.md lists them and their label bounds)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from governor import events
from governor.bulk_metrics import BulkMetric
from governor.policy import devices as dev
from governor.policy.allocate import Allocation

DECISIONS = Counter(
    "governor_decider_decisions_total",
    "Scale decisions published, by the rule that bound them.",
    ["rule"],
)
EVALUATIONS = Counter(
    "governor_decider_evaluations_total", "Policy evaluations, by trigger.", ["trigger"]
)
LATENCY = Histogram(
    "governor_decider_sample_to_decision_seconds",
    "Newest input sample's event time to the publication of a decision made on that input "
    "(decisions the tick made due by time are not observed).",
    buckets=(0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.5, 5.0, 10.0, 30.0),
)
REPLICAS = BulkMetric(
    "governor_decider_replicas",
    "Replicas per workload: current (observed), desired (recommended), min and max.",
    ["workload", "kind"],
)
SHADOW_REPLICAS = BulkMetric(
    "governor_decider_shadow_replicas",
    "Replicas a Shadow policy's arm last asked for (never actuated), by workload and policy.",
    ["workload", "policy"],
)
PANIC = BulkMetric(
    "governor_decider_panic_mode", "1 while a workload is in panic mode.", ["workload"]
)
SHORTFALLS = Counter(
    "governor_decider_shortfalls_total",
    "Shortfall records published (resolved ones included), by pool.",
    ["pool"],
)
POOL_SECONDS = Histogram(
    "governor_decider_pool_allocation_seconds",
    "Wall time of one pool's stage 2 (allocation and damping).",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
)

# Per-workload and per-pool views for dashboards and alerts (docs/metrics.md lists the bounds).
# The per-workload ones are BulkMetrics (governor.bulk_metrics): ~9 series per workload, set on
# every evaluation and scraped every 15 s, cost the decider more than any other of its steps.
WORKLOAD_DECISIONS = BulkMetric(
    "governor_decider_workload_decisions_total",
    "Scale decisions published per workload, by direction (up, down, same: a resend) and the "
    "rule that bound them.",
    ["workload", "direction", "rule"],
    kind="counter",
)
METRIC_VALUE = BulkMetric(
    "governor_decider_metric_value",
    "A policy metric's stable-window value as the last evaluation saw it (AverageValue: the "
    "total over replicas; Utilization: percent of requests).",
    ["workload", "metric"],
)
METRIC_TARGET = BulkMetric(
    "governor_decider_metric_target",
    "A policy metric's target, by target type (Value, AverageValue, Utilization).",
    ["workload", "metric", "target_type"],
)
POOL_CAPACITY = Gauge(
    "governor_decider_pool_capacity",
    "What a pool's allocation could hand out, by resource (its unit: cores, bytes, devices): "
    "allocatable minus unmanaged requests; GPUs and RDMA VFs from healthy devices.",
    ["pool", "resource"],
)
POOL_ALLOCATED = Gauge(
    "governor_decider_pool_allocated",
    "What the granted replicas of a pool's allocation request, by resource.",
    ["pool", "resource"],
)
POOL_SHORTFALL = Gauge(
    "governor_decider_pool_shortfall",
    "What the replicas wanted but not granted would need, by the resource that ran out.",
    ["pool", "resource"],
)
SHORTFALL_REPLICAS = BulkMetric(
    "governor_decider_shortfall_replicas",
    "Replicas a workload wanted that its pool's allocation could not grant.",
    ["workload", "pool"],
)
ELASTIC_RESTARTS = BulkMetric(
    "governor_decider_elastic_restarts",
    "Restarts observed on an elastic training job (WorkloadState.restarts).",
    ["workload"],
)


def replica_use(rec: events.Recommendation) -> dict[str, float]:
    """One replica's request per allocation dimension (whole GPUs, RDMA VFs included)."""
    use = {r: a for r, a in rec.requests.items() if a > 0 and r not in dev.DEVICE_RESOURCES}
    req = dev.device_request(rec.requests, rec.joint_allocate)
    if req.gpus or req.gpu_share:
        use[dev.GPU] = req.gpus + req.gpu_share / dev.WHOLE
    if req.nics:
        use[dev.RDMA] = float(req.nics)
    return use


def pool_metrics(
    pool: str,
    alloc: Allocation,
    recs: Mapping[str, events.Recommendation],
    child: Callable[..., Any],
) -> None:
    """Capacity, allocation and shortfall of a pool's allocation (`child`: a cached labels())."""
    allocated = dict.fromkeys(alloc.capacity, 0.0)
    short = dict.fromkeys(alloc.capacity, 0.0)
    for workload, grant in alloc.grants.items():
        rec = recs.get(workload)
        if rec is not None:
            for r, a in replica_use(rec).items():
                allocated[r] = allocated.get(r, 0.0) + grant.replicas * a
        for r, a in grant.missing.items():
            short[r] = short.get(r, 0.0) + a
        child(SHORTFALL_REPLICAS, workload, pool).set(max(0, grant.wanted - grant.replicas))
    for r, a in alloc.capacity.items():
        POOL_CAPACITY.labels(pool, r).set(a)
    for r, a in allocated.items():
        POOL_ALLOCATED.labels(pool, r).set(a)
    for r, a in short.items():
        POOL_SHORTFALL.labels(pool, r).set(a)


def recommendation_metrics(
    rec: events.Recommendation,
    observed: events.WorkloadState | None,
    child: Callable[..., Any],
) -> None:
    """A workload's replicas, panic, metric values and targets, and an elastic job's restarts,
    as its latest recommendation has them (`child`: a cached labels())."""
    workload = rec.workload
    for kind, value in (
        ("current", rec.current),
        ("desired", rec.desired),
        ("min", rec.min_replicas),
        ("max", rec.max_replicas),
    ):
        child(REPLICAS, workload, kind).set(value)
    child(PANIC, workload).set(any(r.rule == "panic" for r in rec.reasons))
    for inp in rec.inputs:
        child(METRIC_TARGET, workload, inp.metric, inp.target_type).set(inp.target)
        if inp.value is not None:
            child(METRIC_VALUE, workload, inp.metric).set(inp.value)
    if rec.elastic and observed is not None:
        child(ELASTIC_RESTARTS, workload).set(observed.restarts)
