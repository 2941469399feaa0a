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
* A decision lowers replicas only on input newer than the last change's (`frozen_scale_down`).
  A window whose samples stopped (a collector or source gone, before they count as stale) still
  reads as the load the old replica count served; a ratio over the new count (`Value`,
  `Utilization`) would shrink again on every evaluation. Event time against event time, never
  the wall clock: backfilled or clock-skewed samples are no reason to freeze.
* Nor while the input runs late (`lag_floor`, `hold_late`): a decider cut off from the broker
  (or a source gone quiet) keeps evaluating its last windows, and a scale-down stabilization
  window ages out on them long before they count as stale (a pushed metric's 60 s). The lag
  (decider clock minus newest input) is compared with its own recent floor, not with zero, so
  a steady offset (clock skew, a backfill, the aggregator's delay) holds nothing; only input
  falling behind by more than `STALL_STEPS` decision steps (or source intervals) holds.
* The fallback fires (KEDA's `NumberOfFailures > failureThreshold`) once the consecutive failing
  evaluations exceed `failureThreshold`, or once the data has been failing for longer than
  `staleAfterSeconds`. KEDA counts polls; governor counts evaluations (messages and ticks).
  KEDA keeps a counter per trigger; governor one per workload, applied to every failing metric
  except resource (cpu/memory) metrics, for which KEDA has no fallback: those only ever hold.
"""

from __future__ import annotations

import math
from typing import Final

import msgspec

from governor.events import Reason
from governor.policy.types import ScaleResult
from governor.spec import FallbackSpec, MetricSpec, PushSource, ResourceSource, ScalingPolicySpec

DEFAULT_STALE_SECONDS = 60.0
STALE_INTERVALS = 3.0
METRICS_API_RESOLUTION_SECONDS = 1.0  # metav1.Time: PodMetrics timestamps are whole seconds
# Input later than its floor by this many decision steps (or source intervals) holds scale-downs:
# one step of jitter is normal (a sample lands just after an evaluation), two are not.
STALL_STEPS: Final = 2.0
# How fast the lag's floor follows a lag that stays higher (seconds per second): a lasting new
# offset (a slower aggregator) stops holding after offset / LAG_RELAX, while a stall's lag
# outgrows the floor at 1 - LAG_RELAX and holds after bound / (1 - LAG_RELAX).
LAG_RELAX = 0.1


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


def frozen_scale_down(
    current: int, to: int, desired: int, last_to: int | None, newest: float, last_change: float
) -> bool:
    """Whether lowering `current` to `to` would act again on the inputs of the last change.

    Only what the metrics asked for is held (`to` at or above the recommendation): a cut below
    it (a clamp, a smaller grant in the pool) is the policy's or the pool's, not the data's. A
    re-send of the last decision (`to == last_to`) and a decision with no input at all (bounds,
    schedules) are not held."""
    return desired <= to < current and to != last_to and 0.0 < newest <= last_change


def late_bound(policy: ScalingPolicySpec, step_seconds: float) -> float:
    """How far input may fall behind its lag's floor before it holds scale-downs: STALL_STEPS of
    the longest of the decision step and the policy's source intervals (a push has none)."""
    hit = _INTERVALS.get(id(policy))
    if hit is None or hit[0] is not policy:
        # Memoized by identity as `compile_policy` is (a policy is a value): the decider asks
        # on every evaluation, and the list and isinstance checks were a visible share of one.
        # The longest interval (-inf for none, push only: the step decides).
        longest = max(
            (
                m.source.interval_seconds
                for m in policy.metrics
                if not isinstance(m.source, PushSource)
            ),
            default=-math.inf,
        )
        if len(_INTERVALS) >= _INTERVALS_MAX:
            del _INTERVALS[next(iter(_INTERVALS))]
        hit = _INTERVALS[id(policy)] = (policy, longest)
    longest = hit[1]
    return STALL_STEPS * (longest if longest > step_seconds else step_seconds)


# Final: compiled code reads them as C statics, not from the module's dict
_INTERVALS: Final[dict[int, tuple[ScalingPolicySpec, float]]] = {}
_INTERVALS_MAX: Final = 131_072  # as evaluation._CACHE_MAX: above the live policies


def lag_floor(floor: float | None, floor_at: float, lag: float, now: float) -> float:
    """The lag's recent floor after observing `lag` at `now` (`floor` was set at `floor_at`):
    the lowest lag seen, rising by LAG_RELAX per second while the lag stays above it."""
    if floor is None:
        return lag
    return min(lag, floor + LAG_RELAX * max(0.0, now - floor_at))


def hold_late(result: ScaleResult, late_by: float, bound: float) -> ScaleResult:
    """The result with its scale-down held (desired = current) while the input runs `late_by`
    seconds behind its floor, past `bound`; unchanged otherwise (a scale-up never waits)."""
    if result.desired >= result.current or late_by <= bound:
        return result
    detail = (
        f"input {late_by:.3g} s later than usual (over {bound:.3g} s: its source or this"
        f" decider's consumer is cut off): no scale-down, holds {result.current}"
    )
    reason = Reason(rule="stale_hold", detail=detail)
    return msgspec.structs.replace(
        result, desired=result.current, bound_by="stale_hold", reasons=(*result.reasons, reason)
    )
