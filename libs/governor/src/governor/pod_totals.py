"""Per-instant cross-pod totals of a per-pod metric: what HPA's replica calculator means by
"the ready pods' usage", kept so that a window never mixes pod counts.

Why
    A per-pod metric (samples labelled `pod`, or labelled `total` when a sample sums the pods
    of one instant itself, as the resource source's do) reports each pod's share: with load L
    spread over n ready pods each says L/n. A window's plain mean is sample-weighted across
    pods, so when n changes inside it the instants with more pods weigh more: five pods then
    twenty, at a
    constant L, average (5·L/5 + 20·L/20)/25 = L/12.5 per pod, and a policy multiplying that by
    the twenty pods now ready asks for 1.6× what L needs. The sum over the pods of one instant
    is L whatever n is, so the policy compares that total with ready × target instead
    (`per_pod_value`), as HPA compares Σ usage with the ready pods' Σ target.

Instants
    Time is cut into buckets of `resolution` seconds (epoch-aligned, like the windows); a
    bucket's total is the sum over pods of each pod's last value in it (a pod scraped twice
    in one bucket counts once). A window's totals are the statistics of the buckets that start
    in [start, end): count (instants), mean, max, nearest-rank p95. Buckets older than
    the horizon behind the newest sample are dropped, so the state is bounded by
    horizon / resolution buckets of at most one value per pod.

Everything is a value: `add_samples` returns a new `PodTotals` (msgspec-encodable: faust tables).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TypeVar

import msgspec

from governor.events import MetricSample, WindowView
from governor.windows import Aggregation, nearest_rank

V = TypeVar("V", bound=WindowView)  # a WindowView or a LoadWindow

POD_LABEL = "pod"
# A sample that already sums pods (the collector's resource source: their mean, with labels
# `pods` and `total`) is one instant's total by itself, kept under this name.
TOTAL_LABEL = "total"
ALL_PODS = "*"


class PodTotals(msgspec.Struct, array_like=True, omit_defaults=True):
    """The recent buckets of one (workload, metric): bucket start → {pod: newest value}."""

    resolution: float = 1.0
    horizon: float = 60.0  # seconds of buckets kept behind the newest sample
    buckets: dict[float, dict[str, float]] = msgspec.field(default_factory=dict)
    newest: float | None = None


class Totals(msgspec.Struct, frozen=True):
    instants: int
    mean: float
    max: float
    p95: float


def add_samples(totals: PodTotals, samples: Iterable[tuple[float, str, float]]) -> PodTotals:
    """`totals` with (timestamp, pod, value) samples added, buckets older than its horizon
    before the newest sample dropped. A pod's sample replaces the one it sent earlier in the same
    bucket (samples come in their partition's offset order, which is each pod's send order)."""
    res = totals.resolution
    buckets = dict(totals.buckets)
    newest = totals.newest
    copied: set[float] = set()
    for ts, pod, value in samples:
        b = math.floor(ts / res) * res
        if b not in copied:
            buckets[b] = dict(buckets.get(b, {}))
            copied.add(b)
        buckets[b][pod] = value
        newest = ts if newest is None else max(newest, ts)
    if newest is not None:
        oldest = newest - totals.horizon
        buckets = {b: pods for b, pods in buckets.items() if b + res > oldest}
    return PodTotals(resolution=res, horizon=totals.horizon, buckets=buckets, newest=newest)


def pod_sample(sample: MetricSample) -> tuple[float, str, float] | None:
    """(timestamp, pod, value) of a sample that belongs to a per-pod series, else None."""
    labels = sample.labels
    if not labels:
        return None
    pod = labels.get(POD_LABEL)
    if pod:
        return sample.timestamp, pod, sample.value
    total = labels.get(TOTAL_LABEL)
    if total is None:
        return None
    try:
        value = float(total)
    except ValueError:
        return None
    return (sample.timestamp, ALL_PODS, value) if math.isfinite(value) else None


def over(totals: PodTotals, start: float, end: float) -> Totals | None:
    """The totals of the instants in [start, end); None when none has a sample."""
    sums = sorted(sum(pods.values()) for b, pods in totals.buckets.items() if start <= b < end)
    if not sums:
        return None
    return Totals(len(sums), math.fsum(sums) / len(sums), sums[-1], nearest_rank(sums, 0.95))


def with_totals(view: V, totals: PodTotals | None) -> V:
    """The window with its instants' totals filled in (as it is when there are none)."""
    t = over(totals, view.start, view.end) if totals is not None else None
    if t is None:
        return view
    return msgspec.structs.replace(
        view, instants=t.instants, total_mean=t.mean, total_max=t.max, total_p95=t.p95
    )


def total_statistic(window: WindowView, aggregation: Aggregation) -> float | None:
    """The policy's statistic of the window's per-instant totals (None: not a per-pod series)."""
    if window.instants == 0:
        return None
    if aggregation == "mean":
        return window.total_mean
    if aggregation == "max":
        return window.total_max
    return window.total_p95


def per_pod_value(kind: str, value: float, total: float | None, ready: int) -> float:
    """The number a metric of target type `kind` is compared with, given the per-instant total.

    Value and Utilization targets are per-pod averages, so the total over the ready pods of now
    (the ratio is then total / (ready × target), and `ceil(ratio × ready)` the total over the
    target: no pod count from another instant enters). AverageValue targets already take a
    total. Without a total, or with no ready pod to divide by, the window's own value stands.
    """
    if total is None:
        return value
    if kind == "AverageValue":
        return total
    return total / ready if ready > 0 else value
