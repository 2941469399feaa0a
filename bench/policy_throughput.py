"""Scale-policy throughput and state size: full `evaluate` calls per second on one core.

10,000 workloads replay a real load trace (the NAB ELB request count by default), each scaled by
its own factor and started at its own offset, so their loads move independently. The policy has
panic mode, the forecaster and event reduction on, and HPA's default behavior (300 s down-window,
rate limits), so evaluations walk the window history, the rate limits, the panic state and the
forecaster (`--no-forecast`: without it) — not the tolerance short-cut alone.
Decisions are applied (the next evaluation sees the new replica count), as the simulator does.

Only the `evaluate` calls are timed; building the inputs is the caller's cost. The process is
pinned to one CPU and configures the cyclic GC as the decider service does (`governor.gc_tuning`;
`--python-gc`: Python's thresholds). Prints evaluations/s, how results were bound, and the
serialized ScaleState size (msgpack and JSON) after the windows are full, plus a worst case
with 1 s ticks.

    uv run python bench/policy_throughput.py [--trace PATH] [--workloads N] [--steps N]
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import csv
import gc
import os
import pstats
import random
import statistics
import time
from pathlib import Path

import msgspec

from governor import compiled, gc_tuning
from governor.events import WorkloadState
from governor.policy import MetricObservation, ScaleInputs, ScaleResult, ScaleState, evaluate
from governor.spec import ScalingPolicySpec

DEFAULT_TRACE = Path("/work/shared/traces/nab_elb_request_count.csv")
STEP = 15.0
T0 = 1_700_000_000.0
TARGET = 20.0  # per-replica load the policy aims for

POLICY = {
    "targetRef": {"kind": "Deployment", "name": "bench"},
    "minReplicas": 1,
    "maxReplicas": 200,
    "metrics": [{"name": "rps", "target": {"type": "AverageValue", "averageValue": TARGET}}],
    "panic": {"windowSeconds": 6, "stableWindowSeconds": 60, "thresholdPercent": 200},
    # The forecaster (predictive headroom) and event reduction, as governor's default has them.
    "forecast": {"quantile": 0.9},
    "eventReduction": {},
}


def load_trace(path: Path) -> list[float]:
    with path.open(newline="") as f:
        return [float(row["value"]) for row in csv.DictReader(f)]


def pin_one_core() -> str:
    try:
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
        return f"pinned to cpu {cpu}"
    except (AttributeError, OSError):
        return "not pinned (no sched_setaffinity)"


class Fleet:
    """The workloads: their trace offsets and scales, current replicas and policy state."""

    def __init__(self, trace: list[float], n: int, seed: int = 42) -> None:
        rng = random.Random(seed)
        self.trace = trace
        self.scale = [rng.uniform(0.3, 4.0) for _ in range(n)]
        self.offset = [rng.randrange(len(trace)) for _ in range(n)]
        self.current = [
            max(1, round(trace[o] * s / TARGET))
            for o, s in zip(self.offset, self.scale, strict=True)
        ]
        self.states = [ScaleState() for _ in range(n)]
        self.ids = [f"bench/Deployment/w{i}" for i in range(n)]

    def inputs(self, k: int, now: float) -> list[ScaleInputs]:
        trace, n_rows = self.trace, len(self.trace)
        out = []
        for i, (scale, off, cur) in enumerate(
            zip(self.scale, self.offset, self.current, strict=True)
        ):
            stable = trace[(off + k) % n_rows] * scale
            # The short window leads the stable one: it already sees the next trace row.
            panic = trace[(off + k + 1) % n_rows] * scale
            obs = MetricObservation(metric="rps", stable=stable, panic=panic, newest_sample=now)
            wl = WorkloadState(
                workload=self.ids[i], spec_replicas=cur, ready_replicas=cur, observed_at=now
            )
            out.append(ScaleInputs(workload=wl, observations={"rps": obs}))
        return out


def run(
    spec: ScalingPolicySpec, fleet: Fleet, first: int, steps: int
) -> tuple[float, float, int, collections.Counter[str]]:
    """Wall and CPU seconds spent in evaluate, evaluations, and what bound the results."""
    elapsed, cpu, count = 0.0, 0.0, 0
    bound: collections.Counter[str] = collections.Counter()
    states, current = fleet.states, fleet.current
    n = len(states)
    for k in range(first, first + steps):
        now = T0 + k * STEP
        batch = fleet.inputs(k, now)
        results: list[ScaleResult] = [None] * n  # type: ignore[list-item]
        t, c = time.perf_counter(), time.thread_time()
        for i in range(n):
            results[i], states[i] = evaluate(spec, batch[i], states[i], now)
        elapsed += time.perf_counter() - t
        cpu += time.thread_time() - c
        count += n
        for i, r in enumerate(results):
            bound[r.bound_by] += 1
            if r.actionable:
                current[i] = r.desired
    return elapsed, cpu, count, bound


def sizes(states: list[ScaleState]) -> tuple[list[int], list[int]]:
    json_enc, mp_enc = msgspec.json.Encoder(), msgspec.msgpack.Encoder()
    return [len(mp_enc.encode(s)) for s in states], [len(json_enc.encode(s)) for s in states]


def worst_case_state(spec: ScalingPolicySpec) -> ScaleState:
    """1 s ticks for 10 min with a load that flips every tick: every bucket holds min and max."""
    state = ScaleState()
    cur = 10
    for t in range(600):
        now = T0 + t + 0.123456789  # full-precision timestamps, as event time gives
        load = 100.0 if t % 2 else 900.0
        obs = MetricObservation("rps", stable=load, panic=load * 3, newest_sample=now)
        wl = WorkloadState(workload="w", spec_replicas=cur, ready_replicas=cur, observed_at=now)
        r, state = evaluate(spec, ScaleInputs(workload=wl, observations={"rps": obs}), state, now)
        cur = r.desired
    return state


def describe(xs: list[int]) -> str:
    xs = sorted(xs)
    p99 = xs[min(len(xs) - 1, int(0.99 * len(xs)))]
    return f"mean {statistics.fmean(xs):.0f} B, p99 {p99} B, max {xs[-1]} B"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--workloads", type=int, default=10_000)
    ap.add_argument("--warmup-steps", type=int, default=25, help="fill the 300 s window first")
    ap.add_argument("--steps", type=int, default=30, help="timed steps after the warm-up")
    ap.add_argument("--profile", action="store_true", help="cProfile one timed step")
    ap.add_argument(
        "--python-gc",
        action="store_true",
        help="keep Python's GC thresholds (700, 10, 10) instead of the decider's "
        "(governor.gc_tuning); start-up is frozen either way, as the decider does",
    )
    ap.add_argument(
        "--no-forecast", action="store_true", help="the forecaster and event reduction off"
    )
    args = ap.parse_args()

    pinned = pin_one_core()
    policy = dict(POLICY)
    if args.no_forecast:
        del policy["forecast"], policy["eventReduction"]
    spec = msgspec.convert(policy, ScalingPolicySpec)
    fleet = Fleet(load_trace(args.trace), args.workloads)
    # The decider service's GC configuration (governor.gc_tuning), not a bench-only one.
    if not args.python_gc:
        gc_tuning.configure()
    gc_tuning.freeze_startup()

    run(spec, fleet, 0, args.warmup_steps)
    elapsed, cpu, count, bound = run(spec, fleet, args.warmup_steps, args.steps)
    rate, cpu_rate = count / elapsed, count / cpu
    load = os.getloadavg()[0]

    print(
        f"policy throughput ({pinned}; {args.workloads} workloads, trace {args.trace.name};"
        f" GC thresholds {gc.get_threshold()})"
    )
    print(f"  {compiled.describe()}")
    print(
        f"  full evaluations: {count} per {cpu:.2f} CPU-s = {cpu_rate:,.0f}/s on one core "
        f"({1e6 / cpu_rate:.1f} µs each; target ≥ 50,000/s: {cpu_rate / 50_000:.2f}×)"
    )
    print(f"  wall clock: {elapsed:.2f} s = {rate:,.0f}/s (load average {load:.1f} on "
          f"{os.cpu_count()} CPUs: wall time includes waiting for the CPU)")  # fmt: skip
    gc.disable()
    _, nogc_cpu, nogc_count, _ = run(spec, fleet, args.warmup_steps + args.steps, args.steps // 2)
    gc.enable()
    nogc_rate = nogc_count / nogc_cpu
    print(f"  with the cyclic GC off: {nogc_rate:,.0f}/s — the GC takes "
          f"{1 - cpu_rate / nogc_rate:.0%} of the time above")  # fmt: skip
    total = sum(bound.values())
    print("  bound by: " + ", ".join(f"{k} {v / total:.0%}" for k, v in bound.most_common()))

    mp, js = sizes(fleet.states)
    print("ScaleState size after the 300 s window is full (15 s steps):")
    print(f"  msgpack: {describe(mp)}; json: {describe(js)} (target ≤ 4096 B)")
    print(f"  forecaster: {'off' if args.no_forecast else 'on'}")
    worst = worst_case_state(spec)
    w_mp, w_js = sizes([worst])
    print(
        f"  worst case, 1 s ticks, a flipping load for 10 min: msgpack {w_mp[0]} B,"
        f" json {w_js[0]} B"
        f" ({len(worst.rec_at)} history entries, {len(worst.scale_events)} events)"
    )

    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        run(spec, fleet, args.warmup_steps + args.steps + args.steps // 2, 1)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()
