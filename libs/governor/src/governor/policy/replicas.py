"""HPA's replica arithmetic for one metric: the pure part of `replica_calculator.go`.

The functions mirror the upstream ones by name (GetResourceReplicas, getUsageRatioReplicaCount,
GetExternalPerPodMetricReplicas) and keep Go's float64 arithmetic (`ceil(ratio × pods)`, not
`ceil(value × pods / target)`) so results agree to the replica, including at ratios like 1.1 × 10.

What cannot be ported because governor sees aggregates, not pods:

* HPA's per-pod grouping (ready / unready / missing / ignored within the CPU initialization
  period) becomes `spec_replicas − ready_replicas` unready pods with no missing pods: the
  observed utilization is taken to be the average over the ready pods (what a collector scraping
  ready pods reports), and every pod is assumed to request the same amount.
* "missing pods count as 100 % on scale-down / 0 % on scale-up" needs per-pod metrics; a metric
  that reports fewer pods than are ready is indistinguishable here, so that rule is not applied.
* Utilization is a percentage the collector computed; HPA's integer division
  (Σusage×100/Σrequests) is kept by truncating it to a whole percent.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

DEFAULT_TOLERANCE = 0.1

# A few ulps: the rounding a percentage picks up when computed in floats (usage / request ×
# 100, or re-weighted over more pods), which Go's integer division does not have.
_ULPS = 4 * sys.float_info.epsilon


def whole_percent(utilization: float) -> int:
    """HPA's Σusage×100/Σrequests in integers: the percent truncated, but a float that should
    be a whole percent and landed a few ulps under it counts as that percent."""
    return math.floor(utilization * (1.0 + _ULPS))


@dataclass(frozen=True, slots=True)
class Tolerances:
    """HPA's two-sided tolerance band (KEP-4951): no change while 1−down ≤ ratio ≤ 1+up."""

    down: float = DEFAULT_TOLERANCE
    up: float = DEFAULT_TOLERANCE

    def within(self, ratio: float) -> bool:
        # NaN (0/0) is outside the band, as in Go, so a zero total at zero replicas gives 0.
        return (1.0 - self.down) <= ratio <= (1.0 + self.up)


DEFAULT_TOLERANCES = Tolerances()


def usage_ratio_replicas(current: int, ratio: float, ready: int, tol: Tolerances) -> int:
    """getUsageRatioReplicaCount: Value targets of Object and External metrics.

    At zero replicas the ratio alone decides, with no tolerance; otherwise the ready pods are
    what the ratio scales (unready pods are not expected to carry load yet).
    """
    if current != 0:
        if tol.within(ratio):
            return current
        return math.ceil(ratio * ready)
    return math.ceil(ratio)


def per_pod_replicas(current: int, total: float, target_average: float, tol: Tolerances) -> int:
    """GetExternalPerPodMetricReplicas / GetObjectPerPodMetricReplicas: AverageValue targets."""
    denominator = target_average * current
    # At zero replicas Go divides by zero: +Inf (outside the band) or NaN (0/0, also outside).
    zero_ratio = math.inf if total > 0 else math.nan
    ratio = total / denominator if denominator > 0 else zero_ratio
    if tol.within(ratio):
        return current
    return math.ceil(total / target_average)


def utilization_replicas(
    current: int, ready: int, utilization: float, target: float, tol: Tolerances
) -> int | None:
    """GetResourceReplicas for an aggregate: `utilization` is the ready pods' average percent.

    Returns None where HPA returns an error (no ready pod reports a metric), which makes the
    metric invalid for this evaluation.
    """
    if current == 0:
        return math.ceil(whole_percent(utilization) / target)
    if ready <= 0:
        return None
    ratio = whole_percent(utilization) / target
    unready = max(0, current - ready)
    if unready == 0 or ratio <= 1.0:
        # On scale-down unready pods are left out of the ratio altogether.
        if tol.within(ratio):
            return current
        return math.ceil(ratio * ready)
    # On scale-up unready pods count as using 0 % of their request: the ratio over all pods.
    # Recomputed as HPA does, Σusage×100/Σrequests truncated, over ready + unready pods.
    new_ratio = whole_percent(utilization * ready / (ready + unready)) / target
    if tol.within(new_ratio) or new_ratio < 1.0:
        # Too small a change, or counting the unready pods flips the direction: hold.
        return current
    new = math.ceil(new_ratio * (ready + unready))
    if new < current:
        return current
    return new


def raw_replicas(target_type: str, current: int, ready: int, value: float, target: float) -> int:
    """The desired count from a value with no tolerance: the panic window's dppc.

    Knative's dppc = ceil(panic value / per-pod target); for targets HPA scales over ready pods
    (Utilization, Value) the per-pod view multiplies by them, counting at least one (Knative's
    readyPodsCount = max(1, ready)).
    """
    if target_type == "AverageValue":
        return math.ceil(value / target)
    if target_type == "Utilization":
        value = float(whole_percent(value))  # float: mypyc holds the variable's type to it
    return math.ceil(value / target * max(1, ready))
