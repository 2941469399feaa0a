"""Values the scale policy takes and returns. Pure data: services persist ScaleState as it is."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from governor.events import MetricInput, Reason, Rule, WorkloadState
from governor.policy.behavior import split_history
from governor.policy.forecast import ForecastState


class MetricObservation(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """What the windows say of one metric at `now`.

    `stable` is the stable window's statistic (the policy's `aggregation`: mean, max or p95) and
    `panic` the short window's; None when the window has no samples. `newest_sample` is the event
    time of the newest sample behind them — the policy judges staleness by it.
    `stable_total` / `panic_total`: the same statistic of the per-instant cross-pod totals, for
    a per-pod series (`governor.pod_totals`); the policy then scales on them, not on the mean.
    `gc=False` (and on ScaleInputs): numbers and strings, so a dict of them stays untracked too:
    a decider builds one per workload and evaluation, and tracked ones made the cyclic collector
    a fifth of an evaluation.
    """

    metric: str
    stable: float | None
    panic: float | None = None
    newest_sample: float | None = None
    stable_total: float | None = None
    panic_total: float | None = None


class ScaleInputs(msgspec.Struct, frozen=True, gc=False):
    workload: WorkloadState | None
    observations: dict[str, MetricObservation]


class ScaleState(msgspec.Struct, omit_defaults=True, array_like=True, gc=False):
    """Everything the policy remembers between evaluations (array_like keeps it small on the wire).

    rec_at / rec_replicas: the recommendation history, two aligned tuples (entry i is made at
    rec_at[i] and recommends rec_replicas[i]) within the longest stabilization window, at most
    two entries per evaluation step: the smallest and the largest recommendation made in that
    step (one when they agree), stamped with the step's newest evaluation time (behavior.py);
    recommendations: the same history as (time, replicas) pairs, as checkpoints written before
    the flat layout hold it: read (`history_of`), never written (one object per entry was more
    memory and more for the collector to examine, see governor.gc_tuning);
    scale_events: (time, +added/-removed) within the longest rate-limit period;
    panic_since: when panic mode was entered (None when not panicking); panic_max: the highest
    desired count seen while panicking; failures: consecutive evaluations without fresh data;
    last_active: the last time load was above the activation threshold (scale to zero);
    expected_replicas: the replicas the previous evaluation left the target at (its decision);
    failing_since: when the current run of evaluations without fresh data began;
    panic_over_at: the last time the panic window was over the threshold (Knative's panicTime);
    forecasts: per metric, the forecaster's state (policy/forecast.py), when forecast is on;
    merge_since: since when a scale-down smaller than eventReduction's step (or held by the
    tolerance band, or by the forecast's gate) has waited, so it happens after mergeSeconds
    (bandSeconds for the band, gateSeconds for the gate; policy/headroom.py).

    `gc=False`: tuples of numbers and acyclic structs, never a cycle. Tuples, not lists: the
    collector untracks a tuple of numbers the first time it sees one, so the state of 10,000
    workloads is not walked again by every older-generation collection (lists always are).
    """

    recommendations: tuple[tuple[float, int], ...] = ()
    scale_events: tuple[tuple[float, int], ...] = ()
    panic_since: float | None = None
    panic_max: int = 0
    failures: int = 0
    last_active: float | None = None
    expected_replicas: int | None = None
    failing_since: float | None = None
    panic_over_at: float | None = None
    forecasts: dict[str, ForecastState] | None = None
    merge_since: float | None = None
    # Last, so a checkpoint of the old layout (array_like: positions) decodes with them empty.
    rec_at: tuple[float, ...] = ()
    rec_replicas: tuple[int, ...] = ()


def history_of(state: ScaleState) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """The recommendation history as (times, replicas), from either layout (a checkpoint written
    before the flat one has only `recommendations`)."""
    if state.recommendations and not state.rec_at:
        return split_history(state.recommendations)
    return state.rec_at, state.rec_replicas


class ScaleResult(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """`evaluate` returns tuples (untracked by the collector once seen, like ScaleState's)."""

    desired: int
    current: int
    bound_by: Rule
    reasons: Sequence[Reason]
    inputs: Sequence[MetricInput]
    newest_input: float
    # False when the policy must not act at all (e.g. nothing known of the target yet).
    actionable: bool = True
