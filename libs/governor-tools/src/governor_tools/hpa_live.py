"""The simulator's reference HPA against the real one, on the same trace segment.

The real arm: kube-controller-manager's HPA controller (devcluster.sh up --with-hpa) scales a
Deployment with an autoscaling/v2 HPA whose External AverageValue metric is governor-metrics-
adapter's window of the trace, all `speed` times faster than trace time: the controller's sync
period is 15 s / speed, and the HPA's `behavior` (HPA's defaults, those of the simulated one)
is scaled by the same factor. The feeder publishes, every trace second, what the simulated HPA
sees at that time (`HPA_PIPELINE`: the mean over one sync period, one sync old). The pods are
simulated: status.replicas follows spec.replicas, as the HPA counts created pods.

The comparison (`agreement`): per trace second, |live − simulated| ≤ 1 replica; and the
violation-seconds of both replica series under the simulator's replica model (start-up, C).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import math
import time
from typing import Any

import msgspec

from governor import bus
from governor.events import LoadWindow, Topic
from governor.kube import Kube, KubeError
from governor_tools import ab
from governor_tools.sim.policies import HPA_DEFAULT_BEHAVIOR, HPA_PIPELINE, HPA_SYNC_SECONDS
from governor_tools.sim.replay import METRIC, Run, SimConfig, initial_replicas
from governor_tools.sim.runs import policy_evaluate, run_hpa
from governor_tools.sim.traces import Trace, from_rows

NAME = "hpa-live"
Series = list[tuple[float, int]]  # (trace time, replicas asked), in time order


class Result(msgspec.Struct, frozen=True):
    trace: str
    seconds: float
    agreement: float  # fraction of trace seconds within ±1 replica
    violation_live: float
    violation_sim: float
    peak_live: int
    peak_sim: int
    # The model synced at the real controller's phase (`sync_phase`): on a load that changes
    # within one sync period, the phase alone moves the replicas (see `agreement`).
    phase: float = 0.0
    agreement_phased: float = 0.0
    violation_phased: float = 0.0

    @property
    def violation_ratio(self) -> float:
        if self.violation_sim == 0:
            return 1.0 if self.violation_live == 0 else math.inf
        return self.violation_live / self.violation_sim

    def line(self) -> str:
        """One stable line per segment (bench output; others parse it)."""
        return (f"hpa-live {self.trace}: {self.seconds:.0f} s, within ±1 replica "
                f"{100 * self.agreement:.1f} %, violation-s live {self.violation_live:.0f} / sim "
                f"{self.violation_sim:.0f} (ratio {self.violation_ratio:.2f}), peak "
                f"{self.peak_live}/{self.peak_sim}; phase-matched sim (sync +{self.phase:.0f} s): "
                f"within ±1 replica {100 * self.agreement_phased:.1f} %, violation-s "
                f"{self.violation_phased:.0f}")  # fmt: skip


def segment(trace: Trace, start_row: int, rows: int) -> Trace:
    return from_rows(f"{trace.name}[{start_row}:{start_row + rows}]",
                     trace.timestamps[start_row : start_row + rows],
                     trace.values[start_row : start_row + rows], trace.step)  # fmt: skip


def scaled_behavior(speed: float) -> dict[str, Any]:
    """HPA's default behavior with every period and window divided by `speed` (whole seconds)."""

    def rules(r: Any) -> dict[str, Any]:
        out = {
            "stabilizationWindowSeconds": round(r.stabilization_window_seconds / speed),
            "selectPolicy": r.select_policy,
            "policies": [{"type": p.type, "value": p.value,
                          "periodSeconds": max(1, round(p.period_seconds / speed))}
                         for p in r.policies],
        }  # fmt: skip
        return out

    b = HPA_DEFAULT_BEHAVIOR
    return {"scaleUp": rules(b.scale_up), "scaleDown": rules(b.scale_down)}


def simulated(trace: Trace, config: SimConfig) -> tuple[Run, Series]:
    run = run_hpa(trace, config, policy_evaluate())
    return run, [(r.timestamp, r.replicas_requested) for r in run.rows]


def sync_phase(live: Series) -> float:
    """Where in its 15 s period the real controller synced, in trace seconds after a multiple
    of 15 (where the simulator's reference HPA syncs). The live series changes only at syncs,
    seen by `run_live`'s poll about half a trace-second later on average; a circular mean, since
    the residues wrap. Its first point is the initial count, not a sync."""
    changes = [t - 0.5 for t, _ in live[1:]]
    if not changes:
        return 0.0
    turn = 2 * math.pi / HPA_SYNC_SECONDS
    x = sum(math.cos(t * turn) for t in changes)
    y = sum(math.sin(t * turn) for t in changes)
    return round(math.atan2(y, x) / turn, 6) % HPA_SYNC_SECONDS


def simulated_at(trace: Trace, config: SimConfig, phase: float) -> tuple[Run, Series]:
    """The reference HPA syncing at `phase` s after each multiple of 15 s: the trace moved
    later by the rest of the period, the replica series moved back."""
    shift = (-phase) % HPA_SYNC_SECONDS
    moved = from_rows(trace.name, [t + shift for t in trace.timestamps], list(trace.values),
                      trace.step)  # fmt: skip
    run, series = simulated(moved, config)
    return run, [(t - shift, n) for t, n in series]


def _at(series: Series, t: float, initial: int) -> int:
    i = bisect.bisect_right([s for s, _ in series], t) - 1
    return series[i][1] if i >= 0 else initial


def within_one(live: Series, sim: Series, start: float, end: float, initial: int) -> float:
    """The fraction of the trace seconds in [start, end) where the two replica series are at
    most one replica apart (before a series' first point: `initial`)."""
    seconds = range(math.ceil(end - start))
    close = sum(abs(_at(live, start + k, initial) - _at(sim, start + k, initial)) <= 1
                for k in seconds)  # fmt: skip
    return close / max(1, len(seconds))


def agreement(trace: Trace, config: SimConfig, live: Series) -> Result:
    """Compare the live series with the simulated reference HPA on `trace`."""
    run, sim = simulated(trace, config)
    phase = sync_phase(live)
    _, phased = simulated_at(trace, config, phase)
    initial = initial_replicas(_policy(config), trace)
    seconds = range(math.ceil(trace.end - trace.start))
    load = list(zip(trace.timestamps, trace.values, strict=True))
    arms = [ab.Arm("sim", sim), ab.Arm("live", live), ab.Arm("phased", phased)]
    c = ab.compare(load, arms, initial_replicas=initial,
                   start=trace.start, end=trace.end,
                   capacity_per_replica=config.capacity_per_replica,
                   startup_seconds=config.startup_seconds, resamples=1)  # fmt: skip
    sim_score, live_score, phased_score = c.arms
    return Result(
        trace=trace.name, seconds=len(seconds),
        agreement=within_one(live, sim, trace.start, trace.end, initial),
        violation_live=live_score.violation_seconds.value,
        violation_sim=sim_score.violation_seconds.value,
        peak_live=max((r for _, r in live), default=initial), peak_sim=run.summary.peak_replicas,
        phase=phase, agreement_phased=within_one(live, phased, trace.start, trace.end, initial),
        violation_phased=phased_score.violation_seconds.value,
    )  # fmt: skip


def _policy(config: SimConfig) -> Any:
    from governor_tools.sim.policies import hpa_policy

    return hpa_policy(config)


def seen_by_hpa(trace: Trace, t: float) -> float:
    """What the simulated HPA reads at trace time t: the mean load over one sync period ending
    one sync before t (HPA_PIPELINE), per second as the simulator samples it."""
    end = t - HPA_PIPELINE.delay_seconds
    start = end - HPA_PIPELINE.stable_seconds
    ts = trace.timestamps
    vals = []
    for k in range(int(start), int(end)):
        i = bisect.bisect_right(ts, max(k, trace.start)) - 1
        vals.append(trace.values[max(i, 0)])
    return sum(vals) / len(vals) if vals else trace.values[0]


def manifests(
    namespace: str, config: SimConfig, speed: float, initial: int
) -> list[dict[str, Any]]:
    labels = {"app": NAME}
    selector = {"governor.dev/kind": "Deployment", "governor.dev/name": NAME, "window": "stable"}
    milli = round(config.target_utilization * config.capacity_per_replica * 1000)
    return [
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": NAME, "namespace": namespace},
         "spec": {"replicas": initial, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels},
                               "spec": {"containers": [{"name": "w", "image": "w:1"}]}}}},
        {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
         "metadata": {"name": NAME, "namespace": namespace},
         "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": NAME},
                  "minReplicas": 1, "maxReplicas": 1000,
                  "behavior": scaled_behavior(speed),
                  "metrics": [{"type": "External", "external": {
                      "metric": {"name": METRIC, "selector": {"matchLabels": selector}},
                      "target": {"type": "AverageValue", "averageValue": f"{milli}m"},
                  }}]}},
    ]  # fmt: skip


async def run_live(
    kube: Kube, producer: bus.Producer, topic: Topic[LoadWindow], namespace: str, trace: Trace,
    config: SimConfig, *, speed: float = HPA_SYNC_SECONDS / 2,
) -> Series:  # fmt: skip
    """The real HPA over `trace` at `speed`; the replicas it asked for, in trace time."""
    initial = initial_replicas(_policy(config), trace)
    deployment, hpa = manifests(namespace, config, speed, initial)
    await kube.create("apps/v1", "deployments", deployment, namespace=namespace)
    workload = f"{namespace}/Deployment/{NAME}"
    series: Series = []
    wall0 = time.monotonic()
    hpa_created = False
    try:
        while True:
            t = trace.start + (time.monotonic() - wall0) * speed
            if t >= trace.end:
                break
            v = seen_by_hpa(trace, t)
            now = time.time()
            await producer.send(topic, LoadWindow(
                workload=workload, metric=METRIC, window="stable", start=now - 1, end=now,
                count=1, mean=v, max=v, p95=v, newest_sample=now, closed=False))  # fmt: skip
            if not hpa_created:
                await kube.create("autoscaling/v2", "horizontalpodautoscalers", hpa,
                                  namespace=namespace)  # fmt: skip
                hpa_created = True
            d = await kube.get("apps/v1", "deployments", NAME, namespace=namespace)
            n = int(d["spec"]["replicas"])
            if not series or series[-1][1] != n:
                series.append((t, n))
            if (d.get("status") or {}).get("replicas") != n:
                await kube.merge_patch("apps/v1", "deployments", NAME, {"status": {"replicas": n}},
                                       namespace=namespace, subresource="status")  # fmt: skip
            await asyncio.sleep(max(0.0, 1.0 / speed - 0.05))
    finally:
        with contextlib.suppress(KubeError):
            await kube.delete("autoscaling/v2", "horizontalpodautoscalers", NAME,
                              namespace=namespace)  # fmt: skip
    return series


def capacity_for(trace: Trace, peak_replicas: int = 12, utilization: float = 0.7) -> float:
    """A per-replica capacity that puts the segment's peak at about `peak_replicas`."""
    return max(trace.values) / (utilization * peak_replicas)
