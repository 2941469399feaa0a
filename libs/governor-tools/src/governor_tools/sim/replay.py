"""Trace replay: trace -> per-second samples -> windows -> the policy -> the replica model.

The loop is the imperative shell around the same pure code the services run:
`governor.windows` turns samples into windows, and the decider's core decides on them
(`DeciderCore.tick`, the service's own tick, with the run's `evaluate`: `governor.policy.evaluate`
or the oracle's plan). One sample per second of trace time (the trace's value held until its
next row); decisions every `step` seconds, at epoch multiples of the step. The decision at `now`
sees the samples before `now`.

The metric. The simulator feeds one metric, `load`: the total offered load of the workload. A
replica serves up to `capacity_per_replica` (C) of it. Policies express their target on it as an
`AverageValue` per replica: the default policy and the reference HPA use target_utilization × C, so
desired = ceil(load / (target_utilization × C)), HPA's External AverageValue rule.

How a policy sees the metric (`Pipeline`): windows of `stable_seconds` (and `panic_seconds` when the
policy has panic mode) ending at the decision time minus `delay_seconds`; the policy's per-metric
`aggregation` picks mean, max or p95 of each. The sizes and hops are the aggregator's
(`governor.window_sizes`, on a grid of the decision step): gcd(step, size), so a closed window
always ends exactly at a decision time, within its limit of open windows.

Scoring is per second t (load and ready replicas constant over [t, t+1)): a violation second has
load > ready × C; unserved load is Σ max(0, load − ready × C) / Σ load. Replica-hours and scale
events come from the per-step rows (requested replicas after each decision, held for one step).
"""

from __future__ import annotations

import math
from collections import deque

import msgspec

from governor import windows
from governor.cores.decider import DeciderCore, Evaluate
from governor.events import LoadWindow, WorkloadState
from governor.policy import startup
from governor.spec import MetricSpec, ObjectMeta, ScalingPolicy, ScalingPolicySpec
from governor.window_sizes import WindowSettings, hop_for, sized, window_sizes
from governor_tools.sim import replicas as rm
from governor_tools.sim.traces import Trace

METRIC = "load"
WORKLOAD = "sim/Deployment/workload"


class SimError(ValueError):
    """A simulation that cannot run as asked; the message says what to change."""


class SimConfig(msgspec.Struct, frozen=True, kw_only=True):
    capacity_per_replica: float
    startup_seconds: float = 60.0
    target_utilization: float = 0.7
    step_seconds: float = 15.0

    def __post_init__(self) -> None:
        if not self.capacity_per_replica > 0:
            raise SimError("--capacity-per-replica must be > 0")
        if self.startup_seconds < 0:
            raise SimError("--startup-seconds must be >= 0")
        if not 0 < self.target_utilization <= 1:
            raise SimError("--target-utilization must be in (0, 1]")
        if not self.step_seconds >= 1:
            raise SimError("--step must be >= 1 second")


class Pipeline(msgspec.Struct, frozen=True, kw_only=True):
    stable_seconds: float
    panic_seconds: float | None = None
    delay_seconds: float = 0.0


class StepRow(msgspec.Struct, frozen=True, array_like=True):
    timestamp: float
    load: float
    replicas_requested: int
    replicas_ready: int


class Summary(msgspec.Struct, frozen=True):
    violation_seconds: int
    unserved_fraction: float
    replica_hours: float
    scale_events: int
    peak_replicas: int
    # The share of the reference HPA's replica-hour gap to the oracle this run closes
    # (oracle.gap_closed); None for HPA and the oracle themselves, or without both.
    oracle_gap_closed: float | None = None


class Run(msgspec.Struct, frozen=True):
    name: str
    step_seconds: float
    rows: list[StepRow]
    summary: Summary


def sim_windows(step_seconds: float) -> WindowSettings:
    """The simulator's default windows: a stable window of one decision step, on the grid of
    decisions (`governor.window_sizes.hop_for`)."""
    defaults = WindowSettings(hop_grid_seconds=step_seconds)
    return sized(defaults, step_seconds, defaults.panic_window_seconds)


def pipeline_for(policy: ScalingPolicySpec, step_seconds: float) -> Pipeline:
    """How governor's services present the metric to this policy: fresh windows (the aggregator
    closes them within a second) of the sizes the aggregator gives the policy
    (`governor.window_sizes.window_sizes`): stable = panic.stableWindowSeconds, or else one
    decision step; a panic window with panic mode."""
    _load_metric(policy)
    sizes = window_sizes(policy, sim_windows(step_seconds))
    panic = sizes.panic_window_seconds if policy.panic is not None else None
    return Pipeline(stable_seconds=sizes.stable_window_seconds, panic_seconds=panic)


def _load_metric(policy: ScalingPolicySpec) -> MetricSpec:
    names = [m.name for m in policy.metrics]
    if names != [METRIC]:
        raise SimError(
            f"the simulator feeds one metric, {METRIC!r} (total offered load); the policy has "
            f"{names}: give it exactly one metric named {METRIC!r} with an AverageValue target "
            f"per replica"
        )
    return policy.metrics[0]


def initial_replicas(policy: ScalingPolicySpec, trace: Trace) -> int:
    """Every run starts warm: what the policy's target asks for the first row, all serving."""
    target = policy.metrics[0].target
    if target.type != "AverageValue":
        raise SimError(f"metric {METRIC!r}: use target type AverageValue, not {target.type}")
    want = math.ceil(trace.values[0] / target.target_value())
    return min(max(want, policy.min_replicas, 1), policy.max_replicas)


class _Feed:
    """One window kind of the metric, with the recently closed windows kept for the delay."""

    def __init__(self, size: float, step: float, delay: float) -> None:
        hop = hop_for(size, step)  # the aggregator's hop on a grid of decisions
        self.series = windows.SeriesWindows(spec=windows.hopping(size, hop))
        # Enough closed windows to reach back past the delay at the next decision.
        self.closed: deque[windows.WindowAcc] = deque(maxlen=int((delay + step) / hop) + 4)
        self.delay = delay

    def ingest(self, runs: list[tuple[float, int, float]], now: float) -> None:
        """Runs of (first sample time, samples, load) up to `now`, then close up to `now`."""
        for first, n, value in runs:
            self.series, closed, _ = windows.ingest_run(self.series, first, n, value)
            self.closed.extend(closed)
        self.series, closed, _ = windows.advance(self.series, now - self.delay)
        self.closed.extend(closed)

    def latest(self, now: float) -> windows.WindowAcc | None:
        for acc in reversed(self.closed):
            if acc.end <= now - self.delay and acc.count:
                return acc
        return None


def _windows(
    stable: _Feed, panic: _Feed | None, pending: list[tuple[float, int, float]], now: float
) -> list[LoadWindow]:
    """What the aggregator would have published by `now`, once the pending seconds are in: the
    newest closed window of each kind the pipeline's delay lets through."""
    out: list[LoadWindow] = []
    for kind, feed in (("stable", stable), ("panic", panic)):
        if feed is None:
            continue
        feed.ingest(pending, now)
        acc = feed.latest(now)
        if acc is not None:
            out.append(windows.to_load_window(acc, WORKLOAD, METRIC, kind, closed=True))  # type: ignore[arg-type]
    return out


def _decider(spec: ScalingPolicySpec, step: float, evaluate: Evaluate) -> DeciderCore:
    """The decider's core (one instance, both stages) with the policy, scaling the simulated
    workload, and a tick per decision step."""
    core = DeciderCore(step_seconds=step, tick_seconds=step, evaluate=evaluate)
    target = msgspec.structs.replace(spec.target_ref, kind="Deployment", name="workload")
    meta = ObjectMeta(name="workload", namespace="sim")
    policy = ScalingPolicy(metadata=meta, spec=msgspec.structs.replace(spec, target_ref=target))
    core.on_policy(policy.key, policy)
    return core


class _Startups:
    """(requested, ready) of the replicas scale-ups added, oldest first, the newest RECENT kept,
    and the start-up estimate of those ready by `now`. Each ready time is its request plus the
    same start-up and requests only grow, so the ready ones are the oldest: the estimate is
    recomputed only when that prefix or the list changes (it was a tenth of a replay's time)."""

    def __init__(self) -> None:
        self.started: list[tuple[float, float]] = []
        self._ready = 0
        self._estimate: tuple[float | None, float | None] = (None, None)

    def add(self, requested: float, ready: float) -> None:
        self.started = [*self.started, (requested, ready)][-startup.RECENT :]
        self._ready = -1  # recompute at the next `at`

    def at(self, now: float) -> tuple[float | None, float | None]:
        started = self.started
        n = max(0, self._ready)
        while n < len(started) and started[n][1] <= now:
            n += 1
        if n != self._ready:
            self._ready = n
            self._estimate = startup.estimate([r - q for q, r in started[:n]])
        return self._estimate


def _workload_state(
    model: rm.Replicas, now: float, changed_at: float, started: _Startups
) -> WorkloadState:
    """The ready start-ups by `now` give the learned start-up, as the cluster collector's pods
    do."""
    ready = model.ready(now)
    p50, p90 = started.at(now)
    # The workloads topic is compacted and the collector publishes on change, so the state the
    # policy reads is dated when the target last changed (a replica patched or one becoming
    # ready), not when it is read: the policy dates scale events by it.
    latest_ready = model.ready_at[ready - 1] if ready else changed_at
    return WorkloadState(
        workload=WORKLOAD,
        spec_replicas=model.requested,
        ready_replicas=ready,
        observed_at=max(changed_at, latest_ready),
        startup_p50_seconds=p50,
        startup_p90_seconds=p90,
    )


def _feeds(pipe: Pipeline, step: float) -> tuple[_Feed, _Feed | None]:
    """The stable window's feed and, with panic mode, the panic window's."""
    stable = _Feed(pipe.stable_seconds, step, pipe.delay_seconds)
    if pipe.panic_seconds is None:
        return stable, None
    return stable, _Feed(pipe.panic_seconds, step, pipe.delay_seconds)


def replay(
    name: str,
    trace: Trace,
    policy: ScalingPolicySpec,
    config: SimConfig,
    *,
    evaluate: Evaluate,
    pipeline: Pipeline | None = None,
    step_seconds: float | None = None,
    initial: int | None = None,
) -> Run:
    """One policy over a trace; `initial`: the replicas serving at the start (oracle.py)."""
    step = step_seconds or config.step_seconds
    pipe = pipeline or pipeline_for(policy, step)
    _load_metric(policy)
    capacity = config.capacity_per_replica
    stable, panic = _feeds(pipe, step)

    warm = initial if initial is not None else initial_replicas(policy, trace)
    model = rm.serving(warm, since=trace.start)
    core = _decider(policy, step, evaluate)
    rows: list[StepRow] = []
    pending: list[tuple[float, int, float]] = []
    next_decision = (math.floor(trace.start / step) + 1) * step
    violation = events = 0
    unserved = total = 0.0
    changed_at = trace.start
    started = _Startups()

    def decide(now: float, load: float) -> None:
        nonlocal model, pending, events, changed_at
        for window in _windows(stable, panic, pending, now):
            core.on_window(window)
        pending = []
        core.on_workload(_workload_state(model, now, changed_at, started))
        for _, out in core.tick(now):  # the decider's own tick, as the service runs it
            d = out.decision
            if d is None:
                continue
            if d.to_replicas > model.requested:  # the start-ups the policy learns from
                started.add(now, now + config.startup_seconds)
            model = rm.scale(model, d.to_replicas, now, config.startup_seconds)
            events += 1
            changed_at = now
        rows.append(StepRow(now, load, model.requested, model.ready(now)))

    # Walk the trace in stretches where the load and the ready replicas both hold, scoring each
    # second of a stretch alike: months of per-second replay in time proportional to the steps.
    ts, vs = trace.timestamps, trace.values
    row, done, seconds_total = 0, 0, math.ceil(trace.end - trace.start)
    while done < seconds_total:
        t = trace.start + done
        while row + 1 < len(ts) and ts[row + 1] <= t:
            row += 1
        if t >= next_decision:
            decide(next_decision, vs[row])
            next_decision += step
            continue
        boundary = min(next_decision, trace.end)
        if row + 1 < len(ts):
            boundary = min(boundary, ts[row + 1])
        becomes_ready = model.next_ready_after(t)
        if becomes_ready is not None:
            boundary = min(boundary, becomes_ready)
        n = max(1, math.ceil(boundary - trace.start) - done)
        load = vs[row]
        pending.append((t, n, load))
        served = model.ready(t) * capacity
        total += n * load
        if load > served:
            violation += n
            unserved += n * (load - served)
        done += n

    return Run(
        name=name,
        step_seconds=step,
        rows=rows,
        summary=summarize(rows, step, violation, unserved, total, events),
    )


def summarize(
    rows: list[StepRow],
    step: float,
    violation_seconds: int,
    unserved: float,
    total: float,
    scale_events: int,
) -> Summary:
    return Summary(
        violation_seconds=violation_seconds,
        unserved_fraction=unserved / total if total > 0 else 0.0,
        replica_hours=sum(r.replicas_requested for r in rows) * step / 3600.0,
        scale_events=scale_events,
        peak_replicas=max((r.replicas_requested for r in rows), default=0),
    )
