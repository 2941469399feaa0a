"""Cluster scenarios: several workloads on a pool of nodes with devices, through DeciderCore.

A scenario (YAML, `ScenarioSpec`) names a pool's nodes (GPUs and RDMA NICs with their PCIe/NUMA
topology), workloads (services and elastic training jobs, each with a ScalingPolicy spec, a
priority and a load trace) and failures injected at given times (a node down, a GPU or NIC
unhealthy). `run_scenario` plays it three ways, side by side:

* "rebalance": one DeciderCore fed the cluster table (NodeState per node) — stage 1 per workload
  and stage 2 (allocation, priorities, restart-aware damping) per pool, exactly the service's code;
* "no-rebalance": the same core without the cluster table — each workload is scaled alone by its
  own policy (bounds only); what the pool cannot hold stays pending;
* "alone": the rebalance run with the services only (no training jobs): what each service gets on
  an otherwise empty pool, the yardstick for its violations.

The simulated cluster, every `tick_seconds` (the decider's tick):
1. failures due by now change the nodes (and, in the rebalance run, the core's cluster table);
2. each workload's load trace, one sample per second, goes through `governor.windows` (the
   aggregator's windowing: a stable window, and the panic window when the policy has panic mode)
   and the newest closed windows go to the core; then WorkloadState (requested, ready, requests,
   restarts, start time) and the core's tick; its decisions set each workload's requested replicas;
3. the scheduler: a shrink removes pending pods first, then the youngest; pods are bound by a
   priority-ordered queue without preemption (`allocate` with every bound pod as a floor, so a
   failure that leaves bound pods without room evicts the lowest tier's first); a bound pod serves
   `startupSeconds` later; pending pods wait.

The decider's allocation re-places every managed replica from scratch (policy/allocate.py),
while the simulated scheduler never moves a bound pod. After a failure that fragments the
devices the two can differ: the decider may count a replica that the scheduler can only bind by
moving another pod, so that replica stays pending (in the example, one trainer worker after the
GPU failure). That is the gap a real cluster has without a descheduler, and the run shows it.

Scoring is per second: a service's violation second has load > ready × capacityPerReplica; a
training job progresses at speedup(ready) = ready ** scalingEfficiency per second except for
`restartSeconds` after every change of its ready workers (TorchElastic restarts them all: a
restart); GPU-hours count bound pods' GPUs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import msgspec
import yaml

from governor import windows as win
from governor.cores.decider import DeciderCore
from governor.cores.decider_memory import Outputs
from governor.events import NodeState, ScaleDecision, WindowKind, WorkloadState
from governor.policy import devices as dev
from governor.policy import elastic as el
from governor.policy.allocate import Allocation, Demand, allocate
from governor.policy.quotas import Constraints, constraints
from governor.window_sizes import WindowSettings, sized, window_sizes
from governor_tools.sim.scenario_limits import (
    Member,
    check_names,
    queue_states,
    quota_states,
    refused_by_quota,
)
from governor_tools.sim.scenario_spec import (
    METRIC,
    NAMESPACE,
    FailureSpec,
    NodeSpec,
    ScenarioError,
    ScenarioSpec,
    WorkloadSpec,
    apply_failure,
    build_nodes,
    load_at,
    node_names,
    policy,
)

__all__ = [
    "METRIC",
    "NAMESPACE",
    "FailureSpec",
    "NodeSpec",
    "Row",
    "RunName",
    "RunResult",
    "ScenarioError",
    "ScenarioResult",
    "ScenarioSpec",
    "Workload",
    "WorkloadSpec",
    "WorkloadSummary",
    "apply_failure",
    "build_nodes",
    "check",
    "load_at",
    "load_scenario",
    "node_names",
    "policy",
    "run_scenario",
    "simulate",
]

RunName = Literal["rebalance", "no-rebalance", "alone"]


def load_scenario(path: Path) -> ScenarioSpec:
    if not path.is_file():
        raise ScenarioError(f"{path}: no such scenario file")
    try:
        obj = yaml.safe_load(path.read_text("utf-8"))
        spec = msgspec.convert(obj, ScenarioSpec, strict=False)
    except (yaml.YAMLError, msgspec.ValidationError) as e:
        raise ScenarioError(f"{path}: {e}") from None
    check(spec)
    return spec


def check(spec: ScenarioSpec) -> None:
    names = [w.name for w in spec.workloads]
    if len(set(names)) != len(names):
        raise ScenarioError(f"workloads[].name must be unique, got {names}")
    nodes = {n for n in node_names(spec)}
    for f in spec.failures:
        if f.node not in nodes:
            raise ScenarioError(f"failures: unknown node {f.node!r}; nodes: {sorted(nodes)}")
    for w in spec.workloads:
        if not w.trace:
            raise ScenarioError(f"workloads[{w.name}].trace: at least one (t, load) point")
        policy(spec, w)
    members = {w.name: Workload(spec, w).member() for w in spec.workloads}
    problems = check_names(spec.quotas, spec.queues, members)
    if problems:
        raise ScenarioError("; ".join(problems))
    if spec.tick_seconds < 1 or spec.duration_seconds <= 0:
        raise ScenarioError("tickSeconds must be >= 1 and durationSeconds > 0")


# --- the simulated cluster --------------------------------------------------------------------


class _Pods:
    """One workload's pods: requested replicas, bound pods (their ready times), restarts."""

    def __init__(self, requested: int, bound: int, t0: float) -> None:
        self.requested = requested
        self.ready_at = [t0] * bound
        self.restarts = 0
        self.restart_until = -math.inf
        self.last_ready = bound

    @property
    def bound(self) -> int:
        return len(self.ready_at)

    def ready(self, t: float) -> int:
        return sum(1 for r in self.ready_at if r <= t)

    def shrink_to(self, n: int) -> None:
        self.ready_at.sort()
        del self.ready_at[max(n, 0) :]


class Workload:
    def __init__(self, spec: ScenarioSpec, w: WorkloadSpec) -> None:
        self.w = w
        self.policy = policy(spec, w)
        self.id = self.policy.workload
        self.elastic = self.policy.spec.elastic
        self.startup = w.startup_seconds if w.startup_seconds is not None else spec.startup_seconds
        e = self.elastic
        self.restart_seconds = (
            w.restart_seconds
            if w.restart_seconds is not None
            else e.restart_penalty_seconds
            if e is not None
            else 0.0
        )
        self.gpus = dev.device_request(w.requests, w.joint_allocate).gpu_units

    def demand(self, want: int, floor: int) -> Demand:
        return Demand(
            workload=self.id,
            want=want,
            floor=min(floor, want),
            tier=self.policy.spec.priority,
            weight=self.policy.spec.weight,
            elastic=self.elastic is not None,
            requests=self.w.requests,
            joint_allocate=self.w.joint_allocate,
        )

    def member(self) -> Member:
        return Member(
            self.id, self.policy.metadata.namespace, self.w.queue, self.w.requests, self.w.limits
        )

    def initial_desire(self) -> int:
        target = self.policy.spec.metrics[0].target.target_value()
        want = math.ceil(load_at(self.w.trace, 0.0) / target - 1e-9)
        return min(max(want, self.policy.spec.min_replicas), self.policy.spec.max_replicas)


class Row(msgspec.Struct, array_like=True):
    t: float  # seconds from the start
    workload: str
    load: float
    requested: int
    bound: int
    ready: int
    restarts: int


class WorkloadSummary(msgspec.Struct):
    workload: str
    kind: str
    priority: int
    violation_seconds: int = 0  # services
    unserved_fraction: float = 0.0  # services
    gpu_hours: float = 0.0
    restarts: int = 0
    progress: float = 0.0  # training: Σ speedup(ready) × dt, restarts' lost seconds excluded
    restart_loss: float = 0.0  # training: progress the restarts cost
    shortfall_seconds: int = 0  # seconds granted < wanted (a shortfall) or with pods pending
    peak_replicas: int = 0
    decisions: int = 0
    # replica-seconds asked for but not running: refused by a quota at creation, or pending
    failed_replica_seconds: int = 0
    pending_replica_seconds: int = 0


class RunResult(msgspec.Struct):
    name: str
    rows: list[Row]
    summary: dict[str, WorkloadSummary]
    shortfalls: list[tuple[float, str, int, int, str]]  # (t, workload, wanted, granted, reason)


class ScenarioResult(msgspec.Struct):
    scenario: str
    failures: list[tuple[float, str, str]]
    runs: dict[str, RunResult]


STABLE_SECONDS = 60.0  # the aggregator's default stable window


class _Feed:
    """The aggregator's windows of one workload's load (`governor.window_sizes`, on a grid of
    the tick, the aggregator's 60 s stable window by default): stable, and panic when the policy
    has it."""

    def __init__(self, wl: Workload, tick: float) -> None:
        spec = wl.policy.spec
        defaults = WindowSettings(hop_grid_seconds=tick)
        s = window_sizes(spec, sized(defaults, STABLE_SECONDS, defaults.panic_window_seconds))
        sizes: dict[WindowKind, tuple[float, float]] = {
            "stable": (s.stable_window_seconds, s.stable_hop_seconds)
        }
        if spec.panic is not None:
            sizes["panic"] = (s.panic_window_seconds, s.panic_hop_seconds)
        self.series: dict[WindowKind, win.SeriesWindows] = {
            kind: win.SeriesWindows(spec=win.hopping(size, hop))
            for kind, (size, hop) in sizes.items()
        }

    def ingest(
        self, runs: list[tuple[float, int, float]], now: float
    ) -> dict[WindowKind, win.WindowAcc]:
        newest: dict[WindowKind, win.WindowAcc] = {}
        for kind, series in self.series.items():
            closed: list[win.WindowAcc] = []
            for first, n, value in runs:
                series, c, _ = win.ingest_run(series, first, n, value)
                closed += c
            series, c, _ = win.advance(series, now)
            closed += c
            self.series[kind] = series
            full = [a for a in closed if a.count]
            if full:
                newest[kind] = full[-1]
        return newest


def _schedule(
    wls: list[Workload],
    pods: Mapping[str, _Pods],
    nodes: list[NodeState],
    t: float,
    previous: Allocation | None,
    limits: Constraints | None = None,
) -> Allocation:
    """Bind pending pods by priority without preemption; evict what no longer fits. Bound pods
    stay where they are while they fit (the previous placement is handed back). Quotas and
    queues hold as admission and Volcano's scheduler hold them."""
    demands = [wl.demand(pods[wl.id].requested, pods[wl.id].bound) for wl in wls]
    alloc = allocate(demands, nodes, previous, margin=0.0, constraints=limits)
    for wl in wls:
        p = pods[wl.id]
        n = alloc.grants[wl.id].replicas
        if n < p.bound:
            p.shrink_to(n)
        elif n > p.bound:
            p.ready_at += [t + wl.startup] * (n - p.bound)
    return alloc


def _warm_start(
    wls: list[Workload],
    nodes: dict[str, NodeState],
    rebalance: bool,
    t0: float,
    limits: Constraints | None,
) -> tuple[dict[str, _Pods], Allocation]:
    """Start warm: what each policy asks for at t = 0; with rebalance what the pool grants of it
    (as if the decider had been running), without it the pods that do not fit are pending."""
    by_id = {wl.id: wl for wl in wls}
    wants = [wl.demand(wl.initial_desire(), 0) for wl in wls]
    first = allocate(
        [
            msgspec.structs.replace(d, floor=by_id[d.workload].policy.spec.min_replicas)
            for d in wants
        ],
        list(nodes.values()),
        constraints=limits,
    )
    pods: dict[str, _Pods] = {}
    for want in wants:
        granted = first.grants[want.workload].replicas
        pods[want.workload] = _Pods(granted if rebalance else want.want, granted, t0 - 3600.0)
    return pods, first


def _score_second(
    wl: Workload,
    p: _Pods,
    sm: WorkloadSummary,
    t_abs: float,
    load: float,
    left: float,
    offered: dict[str, float],
    served: dict[str, float],
) -> None:
    """One second of one workload: GPU hours, and progress and restarts or served load."""
    ready = p.ready(t_abs)
    sm.gpu_hours += p.bound * wl.gpus / 3600.0
    if wl.elastic is not None:
        if ready != p.last_ready:
            if p.last_ready > 0 or ready > 0:
                p.restarts += 1
                p.restart_until = t_abs + wl.restart_seconds
                sm.restart_loss += el.speedup(ready, wl.elastic.scaling_efficiency) * min(
                    wl.restart_seconds, left
                )
            p.last_ready = ready
        if t_abs >= p.restart_until:
            sm.progress += el.speedup(ready, wl.elastic.scaling_efficiency)
    else:
        capacity = ready * wl.w.capacity_per_replica
        offered[wl.id] += load
        served[wl.id] += min(load, capacity)
        if load > capacity:
            sm.violation_seconds += 1


def _workload_state(wl: Workload, p: _Pods, pool: str, now: float, t0: float) -> WorkloadState:
    """What the cluster-side collector would publish of the workload at `now`."""
    return WorkloadState(
        workload=wl.id,
        spec_replicas=p.requested,
        ready_replicas=p.ready(now),
        observed_at=now,
        requests=dict(wl.w.requests),
        pool=pool,
        joint_allocate=wl.w.joint_allocate,
        restarts=p.restarts,
        started_at=t0 - wl.w.started_ago_seconds if wl.elastic is not None else None,
    )


def _step_row(
    wl: Workload,
    p: _Pods,
    sm: WorkloadSummary,
    short: bool,
    now: float,
    now_rel: float,
    tick: float,
) -> Row:
    """The step's row, after counting its peak and whether the workload was short."""
    sm.peak_replicas = max(sm.peak_replicas, p.requested)
    # Short: the pool granted less than wanted, or pods are pending.
    if short or p.requested > p.bound:
        sm.shortfall_seconds += int(tick)
    return Row(
        t=now_rel,
        workload=wl.id,
        load=load_at(wl.w.trace, now_rel),
        requested=p.requested,
        bound=p.bound,
        ready=p.ready(now),
        restarts=p.restarts,
    )


def _score_seconds(
    spec: ScenarioSpec,
    wls: list[Workload],
    pods: Mapping[str, _Pods],
    summary: Mapping[str, WorkloadSummary],
    start: float,
    now_rel: float,
    offered: dict[str, float],
    served: dict[str, float],
) -> dict[str, list[tuple[float, int, float]]]:
    """Score each workload's seconds [start, now_rel); their load as runs of equal samples
    (start, seconds, load) for the windows."""
    t0 = spec.start
    runs_by: dict[str, list[tuple[float, int, float]]] = {wl.id: [] for wl in wls}
    for s in range(int(start), int(now_rel)):
        t_abs = t0 + s
        for wl in wls:
            load = load_at(wl.w.trace, s)
            r = runs_by[wl.id]
            if r and r[-1][2] == load and r[-1][0] + r[-1][1] == t_abs:
                r[-1] = (r[-1][0], r[-1][1] + 1, load)
            else:
                r.append((t_abs, 1, load))
            left = spec.duration_seconds - s
            _score_second(wl, pods[wl.id], summary[wl.id], t_abs, load, left, offered, served)
    return runs_by


def _apply(
    out: Outputs,
    pods: Mapping[str, _Pods],
    summary: Mapping[str, WorkloadSummary],
    now_rel: float,
    shortfalls: list[tuple[float, str, int, int, str]],
    short_now: dict[str, bool],
) -> None:
    """One pool's tick output: its decisions set requested replicas; its shortfalls noted."""
    ds: list[ScaleDecision] = list(out.decisions)
    if out.decision is not None:
        ds.append(out.decision)
    for d in ds:
        pods[d.workload].requested = d.to_replicas
        summary[d.workload].decisions += 1
    for sf in out.shortfalls:
        shortfalls.append((now_rel, sf.workload, sf.wanted, sf.granted, sf.reason))
        short_now[sf.workload] = sf.granted < sf.wanted


def simulate(spec: ScenarioSpec, run: RunName) -> RunResult:
    wls = [
        Workload(spec, w) for w in spec.workloads if not (run == "alone" and w.kind == "training")
    ]
    nodes = build_nodes(spec)
    core = DeciderCore(step_seconds=spec.tick_seconds)
    rebalance = run != "no-rebalance"
    t0, tick = spec.start, spec.tick_seconds
    for wl in wls:
        core.on_policy(wl.policy.key, wl.policy)
    members = [wl.member() for wl in wls]
    quotas, queues = quota_states(spec.quotas, members), queue_states(spec.queues, members)
    limits = constraints(quotas, queues, [wl.id for wl in wls], {})
    if rebalance:
        for n in nodes.values():
            core.on_node(n)
        for q in quotas:
            core.on_quota(q.quota, q)
        for queue in queues:
            core.on_queue(queue.queue, queue)
    pods, first = _warm_start(wls, nodes, rebalance, t0, limits)
    placed: Allocation | None = first
    feeds = {wl.id: _Feed(wl, tick) for wl in wls}
    summary = {
        wl.id: WorkloadSummary(workload=wl.id, kind=wl.w.kind, priority=wl.policy.spec.priority)
        for wl in wls
    }
    rows: list[Row] = []
    shortfalls: list[tuple[float, str, int, int, str]] = []
    failures = sorted(spec.failures, key=lambda f: f.at)
    served: dict[str, float] = dict.fromkeys(feeds, 0.0)
    offered: dict[str, float] = dict.fromkeys(feeds, 0.0)
    short_now: dict[str, bool] = dict.fromkeys(feeds, False)
    steps = math.ceil(spec.duration_seconds / tick)
    for k in range(steps):
        start = k * tick
        now_rel = start + tick
        now = t0 + now_rel
        # Score the seconds [start, now) and gather their samples.
        runs_by = _score_seconds(spec, wls, pods, summary, start, now_rel, offered, served)
        # Failures due by now change the cluster table.
        while failures and failures[0].at < now_rel:
            f = failures.pop(0)
            nodes[f.node] = apply_failure(nodes[f.node], f)
            if rebalance:
                core.on_node(nodes[f.node])
        # The aggregator's windows and the collector's WorkloadState, then the decider's tick.
        for wl in wls:
            for kind, acc in feeds[wl.id].ingest(runs_by[wl.id], now).items():
                core.on_window(win.to_load_window(acc, wl.id, METRIC, kind, closed=True))
            core.on_workload(_workload_state(wl, pods[wl.id], spec.pool, now, t0))
        for _, out in core.tick(now):
            _apply(out, pods, summary, now_rel, shortfalls, short_now)
        # The scheduler: shrinks first, then bind by priority.
        for wl in wls:
            p = pods[wl.id]
            if p.requested < p.bound:
                p.shrink_to(p.requested)
        placed = _schedule(wls, pods, list(nodes.values()), now, placed, limits)
        for wl in wls:
            p, sm = pods[wl.id], summary[wl.id]
            unplaced = max(0, p.requested - p.bound) * int(tick)
            if refused_by_quota(placed.grants[wl.id].limit):
                sm.failed_replica_seconds += unplaced
            else:
                sm.pending_replica_seconds += unplaced
            rows.append(_step_row(wl, p, sm, short_now[wl.id], now, now_rel, tick))
    for wl in wls:
        sm = summary[wl.id]
        sm.restarts = pods[wl.id].restarts
        if wl.elastic is None and offered[wl.id] > 0:
            sm.unserved_fraction = 1.0 - served[wl.id] / offered[wl.id]
    return RunResult(name=run, rows=rows, summary=summary, shortfalls=shortfalls)


def run_scenario(spec: ScenarioSpec) -> ScenarioResult:
    check(spec)
    runs: dict[str, RunResult] = {}
    names: list[RunName] = ["rebalance", "no-rebalance"]
    if any(w.kind == "training" for w in spec.workloads) and any(
        w.kind == "service" for w in spec.workloads
    ):
        names.append("alone")
    for name in names:
        runs[name] = simulate(spec, name)
    return ScenarioResult(
        scenario=spec.name,
        failures=[
            (f.at, f.node, f.kind + (f" {f.minor}" if f.minor is not None else ""))
            for f in spec.failures
        ],
        runs=runs,
    )
