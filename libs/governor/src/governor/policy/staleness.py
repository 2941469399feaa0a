"""When metric data counts as missing or stale, and what the fallback (KEDA) then asks for.

A source outage must freeze scaling, never collapse it: stale data never drives a scale-down
(HPA's rule for failed metrics), and only an explicit `fallback` replaces the metric's desire.

* A metric fails an evaluation when it has no observation, no stable value, or its newest sample
  is older than the staleness bound: `fallback.staleAfterSeconds` when set, else three source
  intervals (a Prometheus query or Kafka lag poll every 15 s goes stale after 45 s), or
  DEFAULT_STALE_SECONDS for pushed metrics, which have no interval. A resource (metrics.k8s.io)
  metric gets one second more: its samples carry the PodMetrics timestamp, which the API stamps
  in whole seconds, so a fresh sample can look up to a second old (at a short interval, as in
  the time-compressed demo, that alone made cpu go stale and hold scale-downs).
* The fallback fires (KEDA's `NumberOfFailures > failureThreshold`) once the consecutive failing
  evaluations exceed `failureThreshold`, or once the data has been failing for longer than
  `staleAfterSeconds`. KEDA counts polls; governor counts evaluations (messages and ticks).
  KEDA keeps a counter per trigger; governor one per workload, applied to every failing metric
  except resource (cpu/memory) metrics, for which KEDA has no fallback: those only ever hold.
"""

from __future__ import annotations

from governor.spec import FallbackSpec, MetricSpec, PushSource, ResourceSource, ScalingPolicySpec

DEFAULT_STALE_SECONDS = 60.0
STALE_INTERVALS = 3.0
METRICS_API_RESOLUTION_SECONDS = 1.0  # metav1.Time: PodMetrics timestamps are whole seconds


def stale_after(policy: ScalingPolicySpec, metric: MetricSpec) -> float:
    fb = policy.fallback
    if fb is not None and fb.stale_after_seconds is not None:
        return fb.stale_after_seconds
    source = metric.source
    if isinstance(source, PushSource):
        return DEFAULT_STALE_SECONDS
    if isinstance(source, ResourceSource):
        return STALE_INTERVALS * source.interval_seconds + METRICS_API_RESOLUTION_SECONDS
    return STALE_INTERVALS * source.interval_seconds


def fallback_due(fb: FallbackSpec, failures: int, failing_for: float) -> bool:
    if fb.failure_threshold is not None and failures > fb.failure_threshold:
        return True
    return fb.stale_after_seconds is not None and failing_for > fb.stale_after_seconds


def fallback_replicas(fb: FallbackSpec, current: int) -> int:
    """KEDA's doFallback: the replicas a failing metric asks for, by `fallback.behavior`."""
    if fb.behavior == "currentReplicas":
        return current
    if fb.behavior == "currentReplicasIfHigher":
        return max(current, fb.replicas)
    if fb.behavior == "currentReplicasIfLower":
        return min(current, fb.replicas)
    return fb.replicas
