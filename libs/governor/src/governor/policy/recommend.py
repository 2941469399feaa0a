"""The decider's two stages around `evaluate`, as pure functions: windows to a Recommendation.

Stage 1 (per workload): the newest windows -> MetricObservations -> `evaluate` -> Recommendation.
Stage 2 (per pool): Recommendation -> the replicas to ask for. Without a capacity view this is the
policy's bounds; the allocation stage replaces it when the pool's inventory is known.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from governor.events import Reason, Recommendation, WindowKind, WindowView, WorkloadState
from governor.pod_totals import total_statistic
from governor.policy.types import MetricObservation, ScaleResult
from governor.spec import KafkaLagSource, ScalingPolicy, ScalingPolicySpec
from governor.windows import statistic

WindowKey = tuple[str, WindowKind]  # (metric, window kind)


# Window sizes closer than this are one size (a window's end - start at epoch times is exact
# only to a few ulps when the hop is not a whole number of seconds).
SIZE_TOLERANCE = 1e-3


def newer(a: WindowView | None, b: WindowView) -> bool:
    """Whether `b` should replace `a` as the freshest view of its series.

    A later window wins; for the same window a closed one wins over a running estimate, and a
    running estimate with more samples over one with fewer. A window of another size wins: the
    aggregator's windows of the series changed with the policy (`governor.window_sizes`), and
    the new ones, which start afresh, may start before the one held.
    """
    if a is None or abs((b.end - b.start) - (a.end - a.start)) > SIZE_TOLERANCE:
        return True
    if b.start != a.start:
        return b.start > a.start
    return (b.closed, b.count, b.newest_sample) >= (a.closed, a.count, a.newest_sample)


def keep_newest(
    series: dict[WindowKey, WindowView], metric: str, views: Iterable[WindowView]
) -> None:
    """Keep each view in `series` where it is `newer` than the one held for its window."""
    for view in views:
        key = (metric, view.window)
        if newer(series.get(key), view):
            series[key] = view


def observe(
    spec: ScalingPolicySpec, windows: Mapping[WindowKey, WindowView]
) -> dict[str, MetricObservation]:
    """What the policy sees of each of its metrics: the stable and panic windows' statistic."""
    out: dict[str, MetricObservation] = {}
    for metric in spec.metrics:
        stable = windows.get((metric.name, "stable"))
        panic = windows.get((metric.name, "panic"))
        # The newer of the two windows' newest samples (a generator and max() per metric and
        # message were a visible share of the decider's stage 1).
        newest = stable.newest_sample if stable is not None and stable.count else None
        if panic is not None and panic.count and (newest is None or panic.newest_sample > newest):
            newest = panic.newest_sample
        out[metric.name] = MetricObservation(
            metric=metric.name,
            stable=statistic(stable, metric.aggregation) if stable is not None else None,
            panic=statistic(panic, metric.aggregation) if panic is not None else None,
            newest_sample=newest,
            stable_total=total_statistic(stable, metric.aggregation) if stable else None,
            panic_total=total_statistic(panic, metric.aggregation) if panic else None,
        )
    return out


PARTITIONS_SUFFIX = ".partitions"


def partition_cap(spec: ScalingPolicySpec, windows: Mapping[WindowKey, WindowView]) -> int | None:
    """The replicas a Kafka-lag consumer can use: its topic's partition count.

    The collector's `kafka_lag` source publishes `<metric>.partitions` beside the lag (KEDA caps
    replicas at the partition count unless idle consumers are allowed); the newest window's max
    is the count. None when no such metric is known.
    """
    cap: int | None = None
    for metric in spec.metrics:
        source = metric.source
        if not isinstance(source, KafkaLagSource) or source.allow_idle_consumers:
            continue
        window = windows.get((metric.name + PARTITIONS_SUFFIX, "stable"))
        if window is not None and window.count and window.max >= 1:
            cap = int(window.max) if cap is None else min(cap, int(window.max))
    return cap


def with_cap(spec: ScalingPolicySpec, cap: int | None) -> ScalingPolicySpec:
    """`spec` with its replicaCap lowered to `cap` (the same object when nothing changes)."""
    if cap is None or (spec.replica_cap is not None and spec.replica_cap <= cap):
        return spec
    return msgspec.structs.replace(spec, replica_cap=max(cap, spec.min_replicas, 1))


def capped(
    memo: dict[tuple[str, int], tuple[ScalingPolicySpec, ScalingPolicySpec]],
    workload: str,
    spec: ScalingPolicySpec,
    cap: int | None,
) -> ScalingPolicySpec:
    """`with_cap`, memoized per (workload, cap) while the spec object holds: `evaluate` caches
    what it derives per spec object, so a capped spec must stay the same object."""
    if cap is None:
        return spec
    hit = memo.get((workload, cap))
    if hit is None or hit[0] is not spec:
        hit = memo[(workload, cap)] = (spec, with_cap(spec, cap))
    return hit[1]


def floor_of(spec: ScalingPolicySpec) -> int:
    """The replicas a workload keeps even when its pool is short: elastic floor or minReplicas."""
    return spec.elastic.floor if spec.elastic is not None else spec.min_replicas


def recommend(
    policy: ScalingPolicy, workload: WorkloadState, result: ScaleResult, now: float
) -> Recommendation:
    spec = policy.spec
    return Recommendation(
        workload=policy.workload,
        pool=spec.pool,
        desired=result.desired,
        current=workload.spec_replicas,
        ready=workload.ready_replicas,
        min_replicas=spec.min_replicas,
        max_replicas=spec.max_replicas,
        floor=floor_of(spec),
        priority=spec.priority,
        weight=spec.weight,
        requests=dict(workload.requests),
        elastic=spec.elastic is not None,
        reasons=list(result.reasons),
        inputs=list(result.inputs),
        newest_input=result.newest_input,
        policy_generation=policy.metadata.generation,
        computed_at=now,
        joint_allocate=workload.joint_allocate,
    )


def signature(rec: Recommendation) -> tuple[object, ...]:
    """What a bounds-only stage 2 decides on (reasons and inputs only describe it): two
    recommendations with the same signature lead to the same target."""
    return (
        rec.desired,
        rec.current,
        rec.ready,
        rec.min_replicas,
        rec.max_replicas,
        rec.floor,
        rec.pool,
        rec.policy_generation,
    )


def bound(rec: Recommendation) -> tuple[int, list[Reason]]:
    """Stage 2 without a capacity view: the recommendation within the policy's bounds."""
    if rec.desired > rec.max_replicas:
        return rec.max_replicas, [Reason(rule="max", detail=f"maxReplicas {rec.max_replicas}")]
    if rec.desired < rec.min_replicas:
        return rec.min_replicas, [Reason(rule="min", detail=f"minReplicas {rec.min_replicas}")]
    return rec.desired, []
