"""The aggregator's core alone: CPU per sample at N workloads x 1 sample/s, default windows.

    uv run --frozen python bench/aggregator_core.py [--workloads 10000] [--seconds 60]
        [--warmup 70] [--per-batch 1] [--profile] [--python-gc]

Feeds `AggregatorCore` the batches the shell would: every second of event time each workload's
one sample (its own source offset; `--per-batch` more at once, as in a backlog drain), a
`tick` every 0.25 s of the shell's clock and a `checkpoint` every 10 s (the service's
default). The first `--warmup` seconds fill the windows (steady state: every window of both
kinds open); then `--seconds` batches are measured with process CPU time, their records made
beforehand. The cyclic GC is configured as the aggregator service configures it
(`governor.gc_tuning`; `--python-gc` keeps Python's thresholds), and start-up is frozen.
Prints `core: N workloads, S samples, X us CPU/sample` (and a cProfile with --profile).
"""

from __future__ import annotations

import argparse
import cProfile
import math
import pstats
import time

from governor import events, gc_tuning
from governor.cores.aggregator import AggregatorCore, WindowSettings, WorkloadSamples

T0 = 1_764_000_000.0


def batches(names: list[str], t: int, offsets: list[int], per_batch: int) -> list[WorkloadSamples]:
    """One batch of every workload: its samples of `per_batch` seconds of event time from
    t * per_batch (one a second, each with its own source offset)."""
    out = []
    for i, name in enumerate(names):
        items = []
        for s in range(t * per_batch, (t + 1) * per_batch):
            ts = T0 + s + (i % 1000) / 1000.0  # scrapes spread over the second
            value = 40.0 + 35.0 * math.sin((s + i) / 30.0) + (i * 7 + s * 13) % 11
            off = offsets[i] = offsets[i] + 1
            smp = events.MetricSample(workload=name, metric="rps", value=value, timestamp=ts)
            items.append((off, smp))
        out.append(WorkloadSamples(name, items, float(t)))
    return out


def second(core: AggregatorCore, records: list[WorkloadSamples], t: int) -> None:
    """One batch into the core, then the shell's timers of one second of its clock."""
    for record in records:
        core.on(record)
    for q in range(4):
        core.tick(t + q * 0.25)
    if t % 10 == 0:
        core.checkpoint()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--workloads", type=int, default=10_000)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=70)
    ap.add_argument(
        "--per-batch", type=int, default=1, help="samples per workload and batch (a drain: more)"
    )
    ap.add_argument("--profile", action="store_true")
    ap.add_argument(
        "--python-gc",
        action="store_true",
        help="keep Python's GC thresholds instead of the aggregator's (governor.gc_tuning)",
    )
    a = ap.parse_args()
    if not a.python_gc:
        gc_tuning.configure()  # as the aggregator service does at start
    core = AggregatorCore(WindowSettings())
    gc_tuning.freeze_startup()  # and after its start-up
    names = [f"bench/Deployment/w{i}" for i in range(a.workloads)]
    offsets = [0] * a.workloads
    warm = -(-a.warmup // a.per_batch)
    for t in range(warm):
        second(core, batches(names, t, offsets, a.per_batch), t)
    # The records are made before the clock starts: what is measured is the core's CPU alone.
    todo = [(t, batches(names, t, offsets, a.per_batch)) for t in range(warm, warm + a.seconds)]
    prof = cProfile.Profile() if a.profile else None
    cpu = time.process_time()
    if prof:
        prof.enable()
    for t, records in todo:
        second(core, records, t)
    if prof:
        prof.disable()
    cpu = time.process_time() - cpu
    n = a.workloads * a.seconds * a.per_batch
    print(
        f"core: {a.workloads} workloads x {a.per_batch}/batch, {n} samples, "
        f"{cpu / n * 1e6:.2f} us CPU/sample"
    )
    if prof:
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
