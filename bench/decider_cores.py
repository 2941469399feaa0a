"""The decider's cores at N workloads x 1 sample/s, without Kafka: CPU per 1,000 workloads and
a cProfile of one second of load.

What one second costs the two split cores (`DeciderCore` role "stage1" and "stage2", as the
service runs them): decoding each workload's load message off the wire (one per series, its
panic window in `more`) into stage 1 (`on_load`), stage 1's evaluation and, the pool having no
inventory, its pass-through decision (`cores.decider_handover`), encoding the recommendations
stage 1 publishes (an unchanged one only every 30 s) and decoding them for stage 2, which drops
them (`decided`). Kafka's own per-record cost (fetch, produce, acks) is
not in it: `pipeline_latency.py` measures the services whole.

    uv run python bench/decider_cores.py [--workloads 10000] [--top 15]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import math
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.pipeline_latency import policy
from governor import compiled, events, gc_tuning
from governor.bus import codec_for
from governor.cores.decider import DeciderCore
from governor.ownership import Ownership


def cores(n: int) -> tuple[DeciderCore, DeciderCore, list[str]]:
    stage1, stage2 = DeciderCore(role="stage1"), DeciderCore(role="stage2")
    workloads = []
    for core in (stage1, stage2):
        core.assign(Ownership.all())
    for i in range(n):
        p = policy("cores", i).policy
        state = events.WorkloadState(
            workload=p.workload, spec_replicas=4, ready_replicas=4, observed_at=0.0
        )
        for core in (stage1, stage2):
            core.on_policy(f"cores/w{i}", p)
            core.on_workload(state)
        workloads.append(p.workload)
    return stage1, stage2, workloads


def load_window(workload: str, t: float, v: float) -> events.LoadWindow:
    """One message per series, as the aggregator publishes: the stable window's estimate
    carrying the panic window's (LoadWindow.more)."""
    return events.LoadWindow(
        workload=workload, metric="rps", window="stable", start=t - 60, end=t, count=60,
        mean=v, max=v, p95=v, newest_sample=t - 0.5, closed=False,
        more=[events.WindowView(window="panic", start=t - 6, end=t, count=6, mean=v, max=v,
                                p95=v, newest_sample=t - 0.5, closed=False)],
    )  # fmt: skip


def one_second(stage1: DeciderCore, stage2: DeciderCore, workloads: list[str], t: float) -> float:
    """CPU seconds of the cores' work for one second of load (the windows are encoded first)."""
    load, recs = codec_for(events.LOAD), codec_for(events.RECOMMENDATIONS)
    raw = []
    for i, wl in enumerate(workloads):
        v = 40 + 35 * math.sin(t / 30 + i)
        raw.append(load.encode(load_window(wl, t, v)))
    started = time.process_time()
    for r in raw:
        stage1.on_load(load.decode(r))
    published = []
    for wl in workloads:
        rec = stage1.decide(wl, t).recommendation
        if rec is not None:
            published.append(recs.encode(rec))
    touched = []
    for r in published:
        rec = recs.decode(r)
        stage2.on_recommendation(rec)
        touched.append(rec.workload)
    for wl in touched:
        stage2.decide(wl, t)
    return time.process_time() - started


def checkpoint_share(n: int = 1000, seconds: int = 120, flush_every: int = 5) -> tuple[int, int]:
    """Stage 1's checkpoint records over `seconds` of this load (after a first minute), written
    against what writing one per evaluated workload per flush would be (the decider service
    flushes every `checkpoint_seconds`, 5 s): (written, one per flush). Decisions passed
    through write their own, before them, in both counts."""
    stage1, _, workloads = cores(n)
    written = every = 0
    for t in range(1000, 1060 + seconds):
        passed = 0  # the pass-through decisions' checkpoints
        for i, wl in enumerate(workloads):
            stage1.on_load(load_window(wl, float(t), 40 + 35 * math.sin(t / 30 + i)))
            passed += stage1.decide(wl, float(t)).checkpoint is not None
        dirty, flushed = 0, 0
        if t % flush_every == flush_every - 1:
            dirty, flushed = len(stage1.dirty), len(stage1.checkpoints_due(float(t)))
        if t >= 1060:
            written, every = written + passed + flushed, every + passed + dirty
    return written, every


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--workloads", type=int, default=10_000)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument(
        "--python-gc",
        action="store_true",
        help="keep Python's GC thresholds instead of the decider's (governor.gc_tuning)",
    )
    args = ap.parse_args()
    if not args.python_gc:
        gc_tuning.configure()  # as the decider service does at start
    stage1, stage2, workloads = cores(args.workloads)
    gc_tuning.freeze_startup()  # and after its start-up (the tables)
    for t in range(1000, 1020):  # fill the windows' histories
        one_second(stage1, stage2, workloads, float(t))
    best = min(one_second(stage1, stage2, workloads, float(t)) for t in range(1020, 1025))
    print(compiled.describe())
    print(
        f"N={args.workloads}: decider cores {best:.3f} CPU-s per second of load = "
        f"{1000 * best / args.workloads:.4f} core per 1000 workloads"
        f" (GC thresholds {gc.get_threshold()})"
    )
    written, every = checkpoint_share()
    print(
        f"checkpoints: stage 1 wrote {written} where one per evaluated workload per flush is "
        f"{every} ({written / every:.2f}x; 1,000 workloads, 2 min after the first)"
    )
    prof = cProfile.Profile()
    prof.enable()
    one_second(stage1, stage2, workloads, 1030.0)
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
